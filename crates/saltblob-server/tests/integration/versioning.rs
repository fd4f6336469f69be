//! Bucket versioning on the store's kept versions: version ids on writes, reads by id, delete markers,
//! deletes of a version, ListObjectVersions, the `null` version of a suspended bucket, copies of a version.

use std::time::Duration;

use saltblob_core::GcOptions;

use crate::TestServer;
use crate::client::{Client, Reply};

/// Sets the bucket's versioning status.
pub(crate) async fn set_versioning(c: &Client, bucket: &str, status: &str) -> Reply {
    c.call("PUT", &format!("/{bucket}"))
        .query("versioning", "")
        .body(format!(
            "<VersioningConfiguration><Status>{status}</Status></VersioningConfiguration>"
        ))
        .send()
        .await
}

/// The bucket's versioning status, empty when never set.
async fn versioning_of(c: &Client, bucket: &str) -> Vec<String> {
    let r = c
        .call("GET", &format!("/{bucket}"))
        .query("versioning", "")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.xml("Status")
}

async fn get_version(c: &Client, path: &str, version: &str) -> Reply {
    c.call("GET", path).query("versionId", version).send().await
}

/// (VersionId, IsLatest) of every version ListObjectVersions shows, and of every delete marker.
async fn listed_versions(
    c: &Client,
    bucket: &str,
) -> (Vec<(String, String)>, Vec<(String, String)>) {
    let r = c
        .call("GET", &format!("/{bucket}"))
        .query("versions", "")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    let section = |tag: &str| -> Vec<(String, String)> {
        text.split(&format!("<{tag}>"))
            .skip(1)
            .map(|s| {
                let field = |f: &str| {
                    s.split(&format!("<{f}>"))
                        .nth(1)
                        .and_then(|x| x.split(&format!("</{f}>")).next())
                        .unwrap_or_default()
                        .to_owned()
                };
                (field("VersionId"), field("IsLatest"))
            })
            .collect()
    };
    (section("Version"), section("DeleteMarker"))
}

#[tokio::test]
async fn a_versioned_bucket_keeps_every_version_and_deletes_with_markers() {
    let s = TestServer::with_bucket("vbkt").await;
    let c = &s.client;
    assert!(versioning_of(c, "vbkt").await.is_empty(), "never enabled");
    let r = c.put("/vbkt/k", "zero").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("x-amz-version-id"),
        "",
        "no version ids before versioning"
    );
    assert_eq!(set_versioning(c, "vbkt", "Enabled").await.status, 200);
    assert_eq!(versioning_of(c, "vbkt").await, ["Enabled"]);

    let v1 = c
        .put("/vbkt/k", "one")
        .await
        .header("x-amz-version-id")
        .to_owned();
    let v2 = c
        .put("/vbkt/k", "two")
        .await
        .header("x-amz-version-id")
        .to_owned();
    assert_eq!((v1.len(), v2.len()), (32, 32), "{v1} {v2}");
    assert_ne!(v1, v2);
    let current = c.get("/vbkt/k").await;
    assert_eq!(
        (current.text(), current.header("x-amz-version-id")),
        ("two".to_owned(), v2.as_str())
    );
    assert_eq!(get_version(c, "/vbkt/k", &v1).await.text(), "one");
    assert_eq!(get_version(c, "/vbkt/k", "null").await.text(), "zero");
    let head = c
        .call("HEAD", "/vbkt/k")
        .query("versionId", &v1)
        .send()
        .await;
    assert_eq!((head.status, head.header("content-length")), (200, "3"));
    // gc with no grace takes none of them.
    s.store
        .gc(&GcOptions::new().with_grace(Duration::ZERO))
        .await
        .expect("gc");
    assert_eq!(get_version(c, "/vbkt/k", &v1).await.text(), "one");
    let (versions, markers) = listed_versions(c, "vbkt").await;
    let t = |v: &str, l: &str| (v.to_owned(), l.to_owned());
    assert_eq!(
        versions,
        [t(&v2, "true"), t(&v1, "false"), t("null", "false")]
    );
    assert!(markers.is_empty());

    // A delete writes a marker: the object is gone from GET and listings, its versions stay.
    let r = c.delete("/vbkt/k").await;
    assert_eq!((r.status, r.header("x-amz-delete-marker")), (204, "true"));
    let marker = r.header("x-amz-version-id").to_owned();
    assert_eq!(marker.len(), 32);
    let r = c.get("/vbkt/k").await;
    assert_eq!((r.status, r.code().as_str()), (404, "NoSuchKey"));
    assert_eq!(r.header("x-amz-delete-marker"), "true");
    assert_eq!(get_version(c, "/vbkt/k", &marker).await.status, 405);
    let listing = c.call("GET", "/vbkt").query("list-type", "2").send().await;
    assert!(listing.xml("Key").is_empty(), "{}", listing.text());
    let (versions, markers) = listed_versions(c, "vbkt").await;
    assert_eq!(markers, [t(&marker, "true")]);
    assert_eq!(versions.len(), 3);
    assert_eq!(get_version(c, "/vbkt/k", &v2).await.text(), "two");

    // Deleting the marker brings the object back; deleting a version removes it.
    let r = c
        .call("DELETE", "/vbkt/k")
        .query("versionId", &marker)
        .send()
        .await;
    assert_eq!((r.status, r.header("x-amz-delete-marker")), (204, "true"));
    assert_eq!(c.get("/vbkt/k").await.text(), "two");
    let r = c
        .call("DELETE", "/vbkt/k")
        .query("versionId", &v1)
        .send()
        .await;
    assert_eq!((r.status, r.header("x-amz-version-id")), (204, v1.as_str()));
    let r = get_version(c, "/vbkt/k", &v1).await;
    assert_eq!((r.status, r.code().as_str()), (404, "NoSuchVersion"));
    assert_eq!(
        listed_versions(c, "vbkt").await.0,
        [t(&v2, "true"), t("null", "false")]
    );

    // Version ids that are not ours.
    for bad in ["v2", "abc", "NULL"] {
        let r = get_version(c, "/vbkt/k", bad).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "InvalidArgument"),
            "{bad}"
        );
        let r = c
            .call("DELETE", "/vbkt/k")
            .query("versionId", bad)
            .send()
            .await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "InvalidArgument"),
            "{bad}"
        );
    }

    // A copy of a version.
    let r = c
        .call("PUT", "/vbkt/copy")
        .header("x-amz-copy-source", &format!("/vbkt/k?versionId={v2}"))
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-amz-copy-source-version-id"), v2);
    assert_eq!(r.header("x-amz-version-id").len(), 32);
    assert_eq!(c.get("/vbkt/copy").await.text(), "two");

    // Suspended: a write is the null version, replacing the earlier null one and keeping the rest.
    assert_eq!(set_versioning(c, "vbkt", "Suspended").await.status, 200);
    assert_eq!(versioning_of(c, "vbkt").await, ["Suspended"]);
    let r = c.put("/vbkt/k", "three").await;
    assert_eq!(
        r.header("x-amz-version-id"),
        "",
        "a write there names no version, as S3"
    );
    assert_eq!(get_version(c, "/vbkt/k", "null").await.text(), "three");
    assert_eq!(
        listed_versions(c, "vbkt").await.0.len(),
        3,
        "copy, k null, k v2"
    );
    assert_eq!(c.put("/vbkt/k", "four").await.status, 200);
    assert_eq!(get_version(c, "/vbkt/k", &v2).await.text(), "two");
    assert_eq!(get_version(c, "/vbkt/k", "null").await.text(), "four");

    // Not empty while versions are kept; empty once they are removed.
    let r = c.delete("/vbkt/k").await;
    assert_eq!(r.header("x-amz-version-id"), "null", "a null delete marker");
    for (path, version) in [("/vbkt/k", "null"), ("/vbkt/k", v2.as_str())] {
        let r = c
            .call("DELETE", path)
            .query("versionId", version)
            .send()
            .await;
        assert_eq!(r.status, 204, "{}", r.text());
    }
    let copy = listed_versions(c, "vbkt").await.0;
    assert_eq!(copy.len(), 1, "{copy:?}");
    let r = c
        .call("DELETE", "/vbkt/copy")
        .query("versionId", &copy[0].0)
        .send()
        .await;
    assert_eq!(r.status, 204);
    let (versions, markers) = listed_versions(c, "vbkt").await;
    assert!(
        versions.is_empty() && markers.is_empty(),
        "{versions:?} {markers:?}"
    );
    assert_eq!(c.delete("/vbkt").await.status, 204);
}

#[tokio::test]
async fn conditional_deletes_in_a_versioned_bucket_judge_the_version_they_name() {
    let s = TestServer::with_bucket("cbkt").await;
    let c = &s.client;
    assert_eq!(set_versioning(c, "cbkt", "Enabled").await.status, 200);
    let first = c.put("/cbkt/k", "first").await;
    let v1 = first.header("x-amz-version-id").to_owned();
    let etag1 = first.header("etag").to_owned();
    let second = c.put("/cbkt/k", "second!").await;
    let etag2 = second.header("etag").to_owned();
    // The current version judged: a wrong ETag or size refuses, the right one writes a marker.
    let r = c
        .call("DELETE", "/cbkt/k")
        .header("if-match", &etag1)
        .send()
        .await;
    assert_eq!(r.status, 412, "{}", r.text());
    let r = c
        .call("DELETE", "/cbkt/k")
        .header("x-amz-if-match-size", "5")
        .send()
        .await;
    assert_eq!(r.status, 412, "{}", r.text());
    let r = c
        .call("DELETE", "/cbkt/k")
        .header("if-match", &etag2)
        .send()
        .await;
    assert_eq!((r.status, r.header("x-amz-delete-marker")), (204, "true"));
    assert_eq!(c.get("/cbkt/k").await.status, 404);
    // Over a marker, the marker is judged: no ETag matches it, `*` and its size 0 do (another marker).
    let r = c
        .call("DELETE", "/cbkt/k")
        .header("if-match", &etag2)
        .send()
        .await;
    assert_eq!((r.status, r.code().as_str()), (412, "PreconditionFailed"));
    let r = c
        .call("DELETE", "/cbkt/k")
        .header("x-amz-if-match-size", "0")
        .send()
        .await;
    assert_eq!((r.status, r.header("x-amz-delete-marker")), (204, "true"));
    let r = c
        .call("DELETE", "/cbkt/k")
        .header("if-match", "*")
        .send()
        .await;
    assert_eq!((r.status, r.header("x-amz-delete-marker")), (204, "true"));
    // A version the key does not have: nothing to delete, whatever the condition.
    let r = c
        .call("DELETE", "/cbkt/k")
        .query("versionId", "0123456789abcdef0123456789abcdef")
        .header("if-match", "\"nope\"")
        .send()
        .await;
    assert_eq!(r.status, 204, "{}", r.text());
    // A named version judged: only its own ETag removes it.
    let r = c
        .call("DELETE", "/cbkt/k")
        .query("versionId", &v1)
        .header("if-match", &etag2)
        .send()
        .await;
    assert_eq!(r.status, 412, "{}", r.text());
    assert_eq!(get_version(c, "/cbkt/k", &v1).await.text(), "first");
    let r = c
        .call("DELETE", "/cbkt/k")
        .query("versionId", &v1)
        .header("if-match", &etag1)
        .send()
        .await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(get_version(c, "/cbkt/k", &v1).await.status, 404);
}

/// The object operations that take a `versionId`: GetObjectAttributes, GetObjectTagging and GetObjectAcl read the
/// version named (a kept one too), PutObjectAcl and PutObjectTagging change it in place (a kept one too),
/// UploadPartCopy copies it; a key that holds nothing answers 404 with `x-amz-delete-marker: false`.
#[tokio::test]
async fn the_object_operations_read_the_version_they_name() {
    let s = TestServer::with_bucket("nbkt").await;
    let c = &s.client;
    assert_eq!(set_versioning(c, "nbkt", "Enabled").await.status, 200);
    let first = c
        .call("PUT", "/nbkt/k")
        .header("x-amz-tagging", "a=1")
        .body("first")
        .send()
        .await;
    let v1 = first.header("x-amz-version-id").to_owned();
    let v2 = c
        .put("/nbkt/k", "second!")
        .await
        .header("x-amz-version-id")
        .to_owned();

    let r = c
        .call("GET", "/nbkt/k")
        .query("attributes", "")
        .query("versionId", &v1)
        .header("x-amz-object-attributes", "ObjectSize")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml("ObjectSize"), ["5"]);
    assert_eq!(r.header("x-amz-version-id"), v1);
    let tags = |v: String| {
        c.call("GET", "/nbkt/k")
            .query("tagging", "")
            .query("versionId", &v)
            .send()
    };
    let r = tags(v1.clone()).await;
    assert_eq!(
        (r.xml("Key"), r.header("x-amz-version-id")),
        (vec!["a".to_owned()], v1.as_str())
    );
    assert!(tags(v2.clone()).await.xml("Key").is_empty());

    let acl = |v: &str, method: &'static str| {
        let call = c
            .call(method, "/nbkt/k")
            .query("acl", "")
            .query("versionId", v);
        if method == "PUT" {
            call.header("x-amz-acl", "public-read")
        } else {
            call
        }
    };
    let r = acl(&v1, "PUT").send().await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(acl(&v1, "GET").send().await.text().contains("AllUsers"));
    assert!(
        !acl(&v2, "GET").send().await.text().contains("AllUsers"),
        "the other version keeps its ACL"
    );
    let r = acl(&v2, "PUT").send().await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(acl(&v2, "GET").send().await.text().contains("AllUsers"));
    // The kept version changed in place keeps its bytes.
    assert_eq!(get_version(c, "/nbkt/k", &v1).await.text(), "first");
    let r = c
        .call("PUT", "/nbkt/k")
        .query("tagging", "")
        .query("versionId", &v2)
        .body("<Tagging><TagSet><Tag><Key>b</Key><Value>2</Value></Tag></TagSet></Tagging>")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(tags(v2.clone()).await.xml("Key"), ["b"]);

    let created = c
        .call("POST", "/nbkt/dst")
        .query("uploads", "")
        .send()
        .await;
    let upload = created.xml("UploadId").remove(0);
    let part = c
        .call("PUT", "/nbkt/dst")
        .query("partNumber", "1")
        .query("uploadId", &upload)
        .header("x-amz-copy-source", &format!("/nbkt/k?versionId={v1}"))
        .send()
        .await;
    assert_eq!(part.status, 200, "{}", part.text());
    assert_eq!(part.header("x-amz-copy-source-version-id"), v1);
    let etag = part.xml("ETag").remove(0);
    let done = c
        .call("POST", "/nbkt/dst")
        .query("uploadId", &upload)
        .body(format!(
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
        ))
        .send()
        .await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(c.get("/nbkt/dst").await.text(), "first");

    for method in ["GET", "HEAD"] {
        let r = c.call(method, "/nbkt/missing").send().await;
        assert_eq!(
            (r.status, r.header("x-amz-delete-marker")),
            (404, "false"),
            "{method}"
        );
    }
}

/// ListObjectVersions' `max-keys` counts versions and markers, as S3's: a page that stops within a key's versions
/// resumes after its last one (NextKeyMarker and NextVersionIdMarker), and the pages together list each version
/// once.
#[tokio::test]
async fn version_listings_page_by_version() {
    let s = TestServer::with_bucket("pbkt").await;
    let c = &s.client;
    assert_eq!(set_versioning(c, "pbkt", "Enabled").await.status, 200);
    for (key, body) in [("a", "1"), ("a", "2"), ("a", "3"), ("b", "1"), ("c", "1")] {
        assert_eq!(c.put(&format!("/pbkt/{key}"), body).await.status, 200);
    }
    assert_eq!(c.delete("/pbkt/c").await.status, 204);
    // Pages of 1 end within a key and exactly at the end of a key marker's rest; of 2 and 3, at key ends too.
    for max_keys in ["1", "2", "3"] {
        pages_list_each_version_once(c, max_keys).await;
    }
}

/// Pages through bucket `pbkt`'s versions `max_keys` at a time: each of the six versions and markers once.
async fn pages_list_each_version_once(c: &Client, max_keys: &str) {
    let mut markers: (Option<String>, Option<String>) = (None, None);
    let mut seen = Vec::new();
    for page in 0.. {
        assert!(page < 10, "the pages never end");
        let mut call = c
            .call("GET", "/pbkt")
            .query("versions", "")
            .query("max-keys", max_keys);
        if let (Some(k), Some(v)) = &markers {
            call = call.query("key-marker", k).query("version-id-marker", v);
        }
        let r = call.send().await;
        assert_eq!(r.status, 200, "{}", r.text());
        let ids = r.xml("VersionId");
        assert!(ids.len() <= max_keys.parse().unwrap_or(0), "{}", r.text());
        seen.extend(r.xml("Key").into_iter().zip(ids));
        if r.xml("IsTruncated") != ["true"] {
            break;
        }
        markers = (
            r.xml("NextKeyMarker").pop(),
            r.xml("NextVersionIdMarker").pop(),
        );
    }
    let keys: Vec<&str> = seen.iter().map(|(k, _)| k.as_str()).collect();
    // Versions are listed before markers within a page, so compare as sets per key.
    let count = |k: &str| keys.iter().filter(|x| **x == k).count();
    assert_eq!(
        (count("a"), count("b"), count("c")),
        (3, 1, 2),
        "max-keys {max_keys}: {seen:?}"
    );
    let mut ids: Vec<&String> = seen.iter().map(|(_, v)| v).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(
        ids.len(),
        6,
        "each version once, max-keys {max_keys}: {seen:?}"
    );
}
