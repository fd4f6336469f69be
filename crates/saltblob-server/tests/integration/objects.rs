//! PutObject, GetObject, HeadObject, DeleteObject, CopyObject: round trips, ranges and conditionals.

use std::time::{Duration, SystemTime};

use crate::TestServer;
use crate::client::hex;

/// MD5 of `data` in hex, as an ETag holds it.
fn md5_hex(data: &[u8]) -> String {
    use s3s::crypto::Checksum as _;
    hex(&s3s::crypto::Md5::checksum(data))
}

/// An HTTP date `offset` from now (negative: in the past).
fn http_date(offset: i64) -> String {
    let at = if offset >= 0 {
        SystemTime::now() + Duration::from_secs(offset.unsigned_abs())
    } else {
        SystemTime::now() - Duration::from_secs(offset.unsigned_abs())
    };
    let mut out = Vec::new();
    s3s::dto::Timestamp::from(at)
        .format(s3s::dto::TimestampFormat::HttpDate, &mut out)
        .expect("format");
    String::from_utf8(out).expect("ascii")
}

#[tokio::test]
async fn put_get_head_delete_round_trip_with_metadata_and_md5_etag() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    // Inline, single-partition and salted (fanned out, bulk) sizes.
    for (key, len) in [
        ("small.txt", 11usize),
        ("medium.bin", 300_000),
        ("large.bin", 9 << 20),
    ] {
        let data: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
        let path = format!("/bkt/dir/{key}");
        let put = c
            .call("PUT", &path)
            .header("content-type", "text/plain")
            .header("x-amz-meta-color", "blue")
            .header("x-amz-meta-Owner", "ops")
            .header("cache-control", "max-age=60")
            .body(data.clone())
            .send()
            .await;
        assert_eq!(put.status, 200, "{key}: {}", put.text());
        let etag = format!("\"{}\"", md5_hex(&data));
        assert_eq!(put.header("etag"), etag, "{key}");

        let get = c.get(&path).await;
        assert_eq!(get.status, 200, "{key}");
        assert_eq!(get.body, data, "{key}");
        assert_eq!(get.header("etag"), etag);
        assert_eq!(get.header("content-type"), "text/plain");
        assert_eq!(get.header("x-amz-meta-color"), "blue");
        assert_eq!(get.header("x-amz-meta-owner"), "ops");
        assert_eq!(get.header("cache-control"), "max-age=60");
        assert_eq!(get.header("content-length"), len.to_string());
        assert!(
            get.header("last-modified").ends_with("GMT"),
            "{:?}",
            get.headers
        );

        let head = c.call("HEAD", &path).send().await;
        assert_eq!(head.status, 200);
        assert_eq!(head.header("etag"), etag);
        assert_eq!(head.header("content-length"), len.to_string());
        assert_eq!(head.header("x-amz-meta-color"), "blue");
        assert!(head.body.is_empty());
    }
    assert_eq!(c.delete("/bkt/dir/small.txt").await.status, 204);
    let gone = c.get("/bkt/dir/small.txt").await;
    assert_eq!((gone.status, gone.code().as_str()), (404, "NoSuchKey"));
    // Deleting a key that holds nothing succeeds, as in S3.
    assert_eq!(c.delete("/bkt/dir/small.txt").await.status, 204);
    let head = c.call("HEAD", "/bkt/dir/small.txt").send().await;
    assert_eq!(head.status, 404);
}

#[tokio::test]
async fn range_gets_answer_206_and_bad_ranges_416() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 256) as u8).collect();
    assert_eq!(c.put("/bkt/r", data.clone()).await.status, 200);
    for (range, start, end) in [
        ("bytes=10-19", 10usize, 20usize),
        ("bytes=99990-", 99_990, 100_000),
        ("bytes=-7", 99_993, 100_000),
        ("bytes=99995-200000", 99_995, 100_000),
        ("bytes=0-0", 0, 1),
    ] {
        let r = c.call("GET", "/bkt/r").header("range", range).send().await;
        assert_eq!(r.status, 206, "{range}: {}", r.text());
        assert_eq!(r.body, data[start..end], "{range}");
        assert_eq!(
            r.header("content-range"),
            format!("bytes {start}-{}/100000", end - 1),
            "{range}"
        );
    }
    for range in ["bytes=100000-", "bytes=200000-300000", "bytes=-0"] {
        let r = c.call("GET", "/bkt/r").header("range", range).send().await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (416, "InvalidRange"),
            "{range}"
        );
    }
}

#[tokio::test]
async fn conditional_gets_and_heads() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let put = c.put("/bkt/k", &b"conditional"[..]).await;
    let etag = put.header("etag").to_owned();
    let cases = [
        ("if-match", etag.clone(), 200),
        ("if-match", "\"0123\"".to_owned(), 412),
        ("if-match", "*".to_owned(), 200),
        ("if-none-match", etag.clone(), 304),
        ("if-none-match", "\"0123\"".to_owned(), 200),
        ("if-modified-since", http_date(3600), 304),
        ("if-modified-since", http_date(-3600), 200),
        ("if-unmodified-since", http_date(-3600), 412),
        ("if-unmodified-since", http_date(3600), 200),
    ];
    for method in ["GET", "HEAD"] {
        for (header, value, status) in &cases {
            let r = c.call(method, "/bkt/k").header(header, value).send().await;
            assert_eq!(r.status, *status, "{method} {header}: {value}");
            if *status == 304 {
                assert!(r.body.is_empty());
                assert_eq!(r.header("etag"), etag);
            }
            if *status == 412 && method == "GET" {
                assert_eq!(r.code(), "PreconditionFailed");
            }
        }
    }
    // If-Match takes precedence over If-Unmodified-Since (RFC 9110), as in S3.
    let r = c
        .call("GET", "/bkt/k")
        .header("if-match", &etag)
        .header("if-unmodified-since", &http_date(-3600))
        .send()
        .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn copy_object_copies_or_replaces_metadata() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let data = vec![42u8; 200_000];
    let put = c
        .call("PUT", "/bkt/src")
        .header("content-type", "application/x-src")
        .header("x-amz-meta-a", "1")
        .body(data.clone())
        .send()
        .await;
    assert_eq!(put.status, 200);
    let copy = c
        .call("PUT", "/bkt/copy")
        .header("x-amz-copy-source", "/bkt/src")
        .send()
        .await;
    assert_eq!(copy.status, 200, "{}", copy.text());
    assert_eq!(copy.xml("ETag"), [put.header("etag")]);
    let got = c.get("/bkt/copy").await;
    assert_eq!(got.body, data);
    assert_eq!(got.header("etag"), put.header("etag"));
    assert_eq!(got.header("content-type"), "application/x-src");
    assert_eq!(got.header("x-amz-meta-a"), "1");

    let replaced = c
        .call("PUT", "/bkt/src")
        .header("x-amz-copy-source", "/bkt/src")
        .header("x-amz-metadata-directive", "REPLACE")
        .header("content-type", "text/plain")
        .header("x-amz-meta-b", "2")
        .send()
        .await;
    assert_eq!(replaced.status, 200, "{}", replaced.text());
    let got = c.call("HEAD", "/bkt/src").send().await;
    assert_eq!(got.header("content-type"), "text/plain");
    assert_eq!(got.header("x-amz-meta-b"), "2");
    assert_eq!(got.header("x-amz-meta-a"), "");
    assert_eq!(got.header("etag"), put.header("etag"));

    let to_itself = c
        .call("PUT", "/bkt/src")
        .header("x-amz-copy-source", "/bkt/src")
        .send()
        .await;
    assert_eq!(
        (to_itself.status, to_itself.code().as_str()),
        (400, "InvalidRequest")
    );
    let missing = c
        .call("PUT", "/bkt/x")
        .header("x-amz-copy-source", "/bkt/nothing")
        .send()
        .await;
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (404, "NoSuchKey")
    );
}

#[tokio::test]
async fn oversized_metadata_and_keys_are_refused() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let r = c
        .call("PUT", "/bkt/meta")
        .header("x-amz-meta-big", &"v".repeat(2100))
        .body(&b"x"[..])
        .send()
        .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "MetadataTooLarge"),
        "{}",
        r.text()
    );
    assert_eq!(c.get("/bkt/meta").await.status, 404);
    let long = format!("/bkt/{}", "k".repeat(1020));
    let r = c.put(&long, &b"x"[..]).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "KeyTooLongError"),
        "{}",
        r.text()
    );
}

#[tokio::test]
async fn conditional_puts() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let first = c
        .call("PUT", "/bkt/k")
        .header("if-none-match", "*")
        .body(&b"one"[..])
        .send()
        .await;
    assert_eq!(first.status, 200);
    let again = c
        .call("PUT", "/bkt/k")
        .header("if-none-match", "*")
        .body(&b"two"[..])
        .send()
        .await;
    assert_eq!(
        (again.status, again.code().as_str()),
        (412, "PreconditionFailed")
    );
    let stale = c
        .call("PUT", "/bkt/k")
        .header("if-match", "\"0123\"")
        .body(&b"two"[..])
        .send()
        .await;
    assert_eq!(
        (stale.status, stale.code().as_str()),
        (412, "PreconditionFailed")
    );
    let missing = c
        .call("PUT", "/bkt/none")
        .header("if-match", "*")
        .body(&b"x"[..])
        .send()
        .await;
    assert_eq!(missing.status, 412);
    assert_eq!(
        c.get("/bkt/k").await.body.as_ref(),
        b"one",
        "refused puts changed nothing"
    );
    let matching = c
        .call("PUT", "/bkt/k")
        .header("if-match", first.header("etag"))
        .body(&b"three"[..])
        .send()
        .await;
    assert_eq!(matching.status, 200);
    assert_eq!(c.get("/bkt/k").await.body.as_ref(), b"three");
}
