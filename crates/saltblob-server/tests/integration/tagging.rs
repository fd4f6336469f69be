//! Tags: an object's (`x-amz-tagging` on PutObject, CopyObject and CreateMultipartUpload; Put/Get/
//! DeleteObjectTagging, changed in place; `x-amz-tagging-count` on GET and HEAD) and a bucket's.

use crate::TestServer;
use crate::client::{Client, Reply};

/// `<Tagging>` with `pairs`.
fn tagging(pairs: &[(&str, &str)]) -> String {
    let tags: String = pairs
        .iter()
        .map(|(k, v)| format!("<Tag><Key>{k}</Key><Value>{v}</Value></Tag>"))
        .collect();
    format!("<Tagging><TagSet>{tags}</TagSet></Tagging>")
}

async fn get_tags(c: &Client, path: &str) -> Reply {
    c.call("GET", path).query("tagging", "").send().await
}

async fn put_tags(c: &Client, path: &str, pairs: &[(&str, &str)]) -> Reply {
    c.call("PUT", path)
        .query("tagging", "")
        .body(tagging(pairs))
        .send()
        .await
}

/// The object's tags as `key=value` texts.
async fn tags_of(c: &Client, path: &str) -> Vec<String> {
    let r = get_tags(c, path).await;
    assert_eq!(r.status, 200, "{}", r.text());
    r.xml("Key")
        .into_iter()
        .zip(r.xml("Value"))
        .map(|(k, v)| format!("{k}={v}"))
        .collect()
}

#[tokio::test]
async fn object_tags_are_set_with_the_object_and_changed_in_place() {
    let s = TestServer::with_bucket("tagbkt").await;
    let c = &s.client;
    let r = c
        .call("PUT", "/tagbkt/k")
        .header("x-amz-tagging", "team=web&cost+center=a%2Fb")
        .body("hello")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        tags_of(c, "/tagbkt/k").await,
        ["cost center=a/b", "team=web"]
    );
    let before = c.call("HEAD", "/tagbkt/k").send().await;
    assert_eq!(before.header("x-amz-tagging-count"), "2");
    assert_eq!(c.get("/tagbkt/k").await.header("x-amz-tagging-count"), "2");
    let version = s.store.head("s3/o/tagbkt/k").await.expect("stored").version;
    // Changed in place: the same version, ETag, Last-Modified and bytes.
    let r = put_tags(c, "/tagbkt/k", &[("a", "1")]).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(tags_of(c, "/tagbkt/k").await, ["a=1"]);
    let after = c.call("HEAD", "/tagbkt/k").send().await;
    assert_eq!(after.header("x-amz-tagging-count"), "1");
    for header in ["etag", "last-modified", "content-length"] {
        assert_eq!(before.header(header), after.header(header), "{header}");
    }
    assert_eq!(
        s.store.head("s3/o/tagbkt/k").await.expect("stored").version,
        version
    );
    assert_eq!(c.get("/tagbkt/k").await.text(), "hello");
    // Refused tag sets change nothing.
    let eleven: Vec<(String, String)> =
        (0..11).map(|i| (format!("k{i}"), "v".to_owned())).collect();
    let eleven: Vec<(&str, &str)> = eleven
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    for bad in [
        &eleven[..],
        &[("k", "1"), ("k", "2")][..],
        &[("aws:system", "x")][..],
    ] {
        let r = put_tags(c, "/tagbkt/k", bad).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "InvalidTag"),
            "{bad:?}"
        );
    }
    let r = c
        .call("PUT", "/tagbkt/other")
        .header("x-amz-tagging", "a=1&a=2")
        .body("x")
        .send()
        .await;
    assert_eq!((r.status, r.code().as_str()), (400, "InvalidTag"));
    assert_eq!(c.get("/tagbkt/other").await.status, 404, "nothing stored");
    assert_eq!(tags_of(c, "/tagbkt/k").await, ["a=1"]);
    // Removed: no tags, no count.
    let r = c
        .call("DELETE", "/tagbkt/k")
        .query("tagging", "")
        .send()
        .await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert!(tags_of(c, "/tagbkt/k").await.is_empty());
    assert_eq!(
        c.call("HEAD", "/tagbkt/k")
            .send()
            .await
            .header("x-amz-tagging-count"),
        ""
    );
    // A missing object, another version.
    let r = put_tags(c, "/tagbkt/missing", &[("a", "1")]).await;
    assert_eq!((r.status, r.code().as_str()), (404, "NoSuchKey"));
    let r = get_tags(c, "/tagbkt/missing").await;
    assert_eq!((r.status, r.code().as_str()), (404, "NoSuchKey"));
    let r = c
        .call("GET", "/tagbkt/k")
        .query("tagging", "")
        .query("versionId", "v2")
        .send()
        .await;
    assert_eq!((r.status, r.code().as_str()), (400, "InvalidArgument"));
}

#[tokio::test]
async fn copies_and_multipart_uploads_carry_tags_as_directed() {
    let s = TestServer::with_bucket("tagbkt").await;
    let c = &s.client;
    let r = c
        .call("PUT", "/tagbkt/src")
        .header("x-amz-tagging", "a=1")
        .body("source")
        .send()
        .await;
    assert_eq!(r.status, 200);
    let copy = |dst: &'static str, directive: Option<&'static str>, tags: Option<&'static str>| {
        let mut call = c.call("PUT", dst).header("x-amz-copy-source", "tagbkt/src");
        if let Some(d) = directive {
            call = call.header("x-amz-tagging-directive", d);
        }
        if let Some(t) = tags {
            call = call.header("x-amz-tagging", t);
        }
        call.send()
    };
    assert_eq!(copy("/tagbkt/copied", None, None).await.status, 200);
    assert_eq!(tags_of(c, "/tagbkt/copied").await, ["a=1"]);
    // COPY ignores a header; REPLACE takes it, or none.
    assert_eq!(
        copy("/tagbkt/kept", Some("COPY"), Some("b=2")).await.status,
        200
    );
    assert_eq!(tags_of(c, "/tagbkt/kept").await, ["a=1"]);
    assert_eq!(
        copy("/tagbkt/replaced", Some("REPLACE"), Some("b=2"))
            .await
            .status,
        200
    );
    assert_eq!(tags_of(c, "/tagbkt/replaced").await, ["b=2"]);
    assert_eq!(
        copy("/tagbkt/untagged", Some("REPLACE"), None).await.status,
        200
    );
    assert!(tags_of(c, "/tagbkt/untagged").await.is_empty());
    let r = copy("/tagbkt/bad", Some("MOVE"), None).await;
    assert_eq!((r.status, r.code().as_str()), (400, "InvalidArgument"));
    // A header COPY ignores is not checked, whatever the metadata directive.
    let r = c
        .call("PUT", "/tagbkt/ignored")
        .header("x-amz-copy-source", "tagbkt/src")
        .header("x-amz-metadata-directive", "REPLACE")
        .header("x-amz-tagging", "aws:reserved=1")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(tags_of(c, "/tagbkt/ignored").await, ["a=1"]);
    // A multipart upload's tags are the object's.
    let r = c
        .call("POST", "/tagbkt/big")
        .query("uploads", "")
        .header("x-amz-tagging", "Hello=World&foo=bar")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let upload = r.xml("UploadId").into_iter().next().expect("upload id");
    let r = c
        .call("PUT", "/tagbkt/big")
        .query("partNumber", "1")
        .query("uploadId", &upload)
        .body("part one")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let etag = r.header("etag").to_owned();
    let r = c
        .call("POST", "/tagbkt/big")
        .query("uploadId", &upload)
        .body(format!(
            "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
        ))
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(tags_of(c, "/tagbkt/big").await, ["Hello=World", "foo=bar"]);
}

#[tokio::test]
async fn bucket_tags_are_kept_and_go_with_their_bucket() {
    let s = TestServer::with_bucket("tagbkt").await;
    let c = &s.client;
    let r = get_tags(c, "/tagbkt").await;
    assert_eq!((r.status, r.code().as_str()), (404, "NoSuchTagSet"));
    let fifty: Vec<(String, String)> = (0..50)
        .map(|i| (format!("k{i}"), format!("v{i}")))
        .collect();
    let fifty: Vec<(&str, &str)> = fifty
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(put_tags(c, "/tagbkt", &fifty).await.status, 200);
    assert_eq!(tags_of(c, "/tagbkt").await.len(), 50);
    let mut more = fifty.clone();
    more.push(("k50", "v50"));
    let r = put_tags(c, "/tagbkt", &more).await;
    assert_eq!((r.status, r.code().as_str()), (400, "InvalidTag"));
    assert_eq!(put_tags(c, "/tagbkt", &[("team", "web")]).await.status, 200);
    assert_eq!(tags_of(c, "/tagbkt").await, ["team=web"]);
    let r = c
        .call("DELETE", "/tagbkt")
        .query("tagging", "")
        .send()
        .await;
    assert_eq!(r.status, 204);
    let r = get_tags(c, "/tagbkt").await;
    assert_eq!((r.status, r.code().as_str()), (404, "NoSuchTagSet"));
    // A record left behind by a deleted bucket never shows on a new one of that name.
    assert_eq!(put_tags(c, "/tagbkt", &[("team", "web")]).await.status, 200);
    let record = s
        .store
        .get("s3/t/tagbkt")
        .await
        .expect("the tagging record");
    assert_eq!(c.delete("/tagbkt").await.status, 204);
    assert!(
        s.store.get("s3/t/tagbkt").await.is_err(),
        "deleted with its bucket"
    );
    assert_eq!(c.call("PUT", "/tagbkt").send().await.status, 200);
    s.store
        .put("s3/t/tagbkt", record, &Default::default())
        .await
        .expect("put the old record back");
    let r = get_tags(c, "/tagbkt").await;
    assert_eq!((r.status, r.code().as_str()), (404, "NoSuchTagSet"));
}
