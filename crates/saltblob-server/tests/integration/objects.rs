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
    // HEAD of a range: 206 with the range's length, as AWS.
    let head = c
        .call("HEAD", "/bkt/r")
        .header("range", "bytes=10-19")
        .send()
        .await;
    assert_eq!(head.status, 206);
    assert_eq!(head.header("content-length"), "10");
    assert_eq!(head.header("content-range"), "bytes 10-19/100000");
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

/// `Expires` is stored with the object (PutObject, CreateMultipartUpload, CopyObject with REPLACE) and
/// returned by GET and HEAD; `aws-chunked`, the request body's framing, is left out of the stored
/// Content-Encoding (as S3).
#[tokio::test]
async fn expires_is_kept_and_aws_chunked_is_not_a_stored_encoding() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let expires = "Wed, 21 Oct 2037 07:28:00 GMT";
    let put = c
        .call("PUT", "/bkt/k")
        .header("expires", expires)
        .header("content-encoding", "gzip, aws-chunked")
        .body(&b"v"[..])
        .send()
        .await;
    assert_eq!(put.status, 200, "{}", put.text());
    for method in ["GET", "HEAD"] {
        let got = c.call(method, "/bkt/k").send().await;
        assert_eq!(got.header("expires"), expires, "{method}");
        assert_eq!(got.header("content-encoding"), "gzip", "{method}");
    }
    let only = c
        .call("PUT", "/bkt/plain")
        .header("content-encoding", "aws-chunked")
        .body(&b"v"[..])
        .send()
        .await;
    assert_eq!(only.status, 200, "{}", only.text());
    let got = c.call("HEAD", "/bkt/plain").send().await;
    assert_eq!(got.header("content-encoding"), "");
    let two = c
        .call("PUT", "/bkt/two")
        .header("content-encoding", "deflate, gzip")
        .body(&b"v"[..])
        .send()
        .await;
    assert_eq!(two.status, 200, "{}", two.text());
    assert_eq!(
        c.call("HEAD", "/bkt/two")
            .send()
            .await
            .header("content-encoding"),
        "deflate, gzip",
        "kept as sent"
    );
    assert_eq!(got.header("expires"), "", "none was sent");

    let copied = c
        .call("PUT", "/bkt/copy")
        .header("x-amz-copy-source", "/bkt/k")
        .send()
        .await;
    assert_eq!(copied.status, 200, "{}", copied.text());
    assert_eq!(
        c.call("HEAD", "/bkt/copy").send().await.header("expires"),
        expires
    );
    let later = "Thu, 22 Oct 2037 07:28:00 GMT";
    let replaced = c
        .call("PUT", "/bkt/copy")
        .header("x-amz-copy-source", "/bkt/k")
        .header("x-amz-metadata-directive", "REPLACE")
        .header("expires", later)
        .send()
        .await;
    assert_eq!(replaced.status, 200, "{}", replaced.text());
    assert_eq!(
        c.call("HEAD", "/bkt/copy").send().await.header("expires"),
        later
    );

    let created = c
        .call("POST", "/bkt/mp")
        .query("uploads", "")
        .header("expires", expires)
        .send()
        .await;
    assert_eq!(created.status, 200, "{}", created.text());
    let id = created.xml("UploadId").pop().expect("upload id");
    let part = c
        .call("PUT", "/bkt/mp")
        .query("partNumber", "1")
        .query("uploadId", &id)
        .body(&b"part"[..])
        .send()
        .await;
    assert_eq!(part.status, 200, "{}", part.text());
    let body = format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{}</ETag></Part></CompleteMultipartUpload>",
        part.header("etag")
    );
    let done = c
        .call("POST", "/bkt/mp")
        .query("uploadId", &id)
        .body(body.into_bytes())
        .send()
        .await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(
        c.call("HEAD", "/bkt/mp").send().await.header("expires"),
        expires
    );
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
    // If-Match on a key that holds nothing: 404 NoSuchKey, as AWS.
    let missing = c
        .call("PUT", "/bkt/none")
        .header("if-match", "*")
        .body(&b"x"[..])
        .send()
        .await;
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (404, "NoSuchKey")
    );
    assert_eq!(c.get("/bkt/none").await.status, 404);
    // Both conditions are evaluated (If-Match first), not refused: on an existing key If-None-Match: * fails.
    for (if_match, status, code) in [
        (first.header("etag"), 412, "PreconditionFailed"),
        ("\"0123\"", 412, "PreconditionFailed"),
    ] {
        let both = c
            .call("PUT", "/bkt/k")
            .header("if-match", if_match)
            .header("if-none-match", "*")
            .body(&b"both"[..])
            .send()
            .await;
        assert_eq!((both.status, both.code().as_str()), (status, code));
    }
    let both_missing = c
        .call("PUT", "/bkt/none")
        .header("if-match", "*")
        .header("if-none-match", "*")
        .body(&b"x"[..])
        .send()
        .await;
    assert_eq!(
        (both_missing.status, both_missing.code().as_str()),
        (404, "NoSuchKey")
    );
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

/// `If-None-Match: ETAG` on a write: refused (412) over the version with that ETag, written over another
/// version or where the key holds nothing (as RGW and ceph/s3-tests' `test_put_object_if_match` expect).
#[tokio::test]
async fn conditional_puts_with_if_none_match_etag() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let put = |path: &'static str, if_none_match: String, body: &'static [u8]| {
        c.call("PUT", path)
            .header("if-none-match", &if_none_match)
            .body(body)
            .send()
    };
    let first = put("/bkt/k", "\"0123\"".to_owned(), b"one").await;
    assert_eq!(
        first.status,
        200,
        "a key that holds nothing: {}",
        first.text()
    );
    let etag = first.header("etag").to_owned();
    let same = put("/bkt/k", etag.clone(), b"two").await;
    assert_eq!(
        (same.status, same.code().as_str()),
        (412, "PreconditionFailed")
    );
    assert_eq!(
        c.get("/bkt/k").await.body.as_ref(),
        b"one",
        "a refused put changed nothing"
    );
    let other = put("/bkt/k", "\"0123\"".to_owned(), b"three").await;
    assert_eq!(other.status, 200, "another ETag: {}", other.text());
    assert_eq!(c.get("/bkt/k").await.body.as_ref(), b"three");
    // With If-Match: both must hold.
    let current = other.header("etag");
    for (if_none_match, body, status, stored) in [
        (current, &b"four"[..], 412, &b"three"[..]),
        (etag.as_str(), &b"five"[..], 200, &b"five"[..]),
    ] {
        let both = c
            .call("PUT", "/bkt/k")
            .header("if-match", current)
            .header("if-none-match", if_none_match)
            .body(body)
            .send()
            .await;
        assert_eq!(both.status, status, "{}", both.text());
        assert_eq!(c.get("/bkt/k").await.body.as_ref(), stored);
    }
}

/// A multipart object made of `parts` at `path`; returns its ETag (without quotes).
async fn multipart_object(c: &crate::client::Client, path: &str, parts: &[&[u8]]) -> String {
    let created = c.call("POST", path).query("uploads", "").send().await;
    assert_eq!(created.status, 200, "{}", created.text());
    let id = created.xml("UploadId").pop().expect("upload id");
    let mut listed = String::new();
    for (i, data) in parts.iter().enumerate() {
        let number = (i + 1).to_string();
        let r = c
            .call("PUT", path)
            .query("partNumber", &number)
            .query("uploadId", &id)
            .body(data.to_vec())
            .send()
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        listed.push_str(&format!(
            "<Part><PartNumber>{number}</PartNumber><ETag>{}</ETag></Part>",
            r.header("etag")
        ));
    }
    let done = c
        .call("POST", path)
        .query("uploadId", &id)
        .body(format!(
            "<CompleteMultipartUpload>{listed}</CompleteMultipartUpload>"
        ))
        .send()
        .await;
    assert_eq!(done.status, 200, "{}", done.text());
    done.xml("ETag")[0].trim_matches('"').to_owned()
}

/// GetObjectAttributes: the attributes asked for (ETag unquoted, the checksum and its type, the size, the
/// storage class); the parts of a multipart object, paged; no parts for an object put in one piece; an unknown
/// attribute is refused.
#[tokio::test]
async fn get_object_attributes_answers_what_is_asked() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let attributes = |path: &'static str, asked: &'static str| {
        c.call("GET", path)
            .query("attributes", "")
            .header("x-amz-object-attributes", asked)
    };
    let put = c
        .call("PUT", "/bkt/one")
        .header(
            "x-amz-checksum-sha256",
            "LCa0a2j/xo/5m0U8HTBBNBNCLXBkg7+g+YpeiGJm564=",
        )
        .body(&b"foo"[..])
        .send()
        .await;
    assert_eq!(put.status, 200, "{}", put.text());
    let r = attributes(
        "/bkt/one",
        "ETag,Checksum,ObjectParts,StorageClass,ObjectSize",
    )
    .send()
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml("ETag"), [md5_hex(b"foo")], "unquoted: {}", r.text());
    assert_eq!(r.xml("ObjectSize"), ["3"]);
    assert_eq!(r.xml("StorageClass"), ["STANDARD"]);
    assert_eq!(
        r.xml("ChecksumSHA256"),
        ["LCa0a2j/xo/5m0U8HTBBNBNCLXBkg7+g+YpeiGJm564="]
    );
    assert_eq!(r.xml("ChecksumType"), ["FULL_OBJECT"]);
    assert!(!r.text().contains("ObjectParts"), "{}", r.text());
    let only = attributes("/bkt/one", "ObjectSize").send().await;
    assert_eq!(only.xml("ObjectSize"), ["3"]);
    assert!(only.xml("ETag").is_empty(), "{}", only.text());

    let part = vec![7u8; 5 << 20];
    let etag = multipart_object(c, "/bkt/mp", &[&part, &part, &part, b"tail"]).await;
    let r = attributes("/bkt/mp", "ETag,ObjectParts")
        .header("x-amz-max-parts", "1")
        .header("x-amz-part-number-marker", "2")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml("ETag"), [etag]);
    assert_eq!(r.xml("PartsCount"), ["4"], "{}", r.text());
    assert_eq!(r.xml("PartNumber"), ["3"]);
    assert_eq!(r.xml("IsTruncated"), ["true"]);
    assert_eq!(r.xml("NextPartNumberMarker"), ["3"]);
    let rest = attributes("/bkt/mp", "ObjectParts")
        .header("x-amz-part-number-marker", "3")
        .send()
        .await;
    assert_eq!(rest.xml("PartNumber"), ["4"]);
    assert_eq!(rest.xml("Size"), ["4"]);
    assert_eq!(rest.xml("IsTruncated"), ["false"]);

    let bad = attributes("/bkt/one", "Size").send().await;
    assert_eq!((bad.status, bad.code().as_str()), (400, "InvalidArgument"));
    let missing = attributes("/bkt/none", "ETag").send().await;
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (404, "NoSuchKey")
    );
}

/// The parts of a multipart object by `partNumber` (206, `Content-Range`, `x-amz-mp-parts-count`), past the last
/// `InvalidPart` (400); an object put in one piece has one part, itself.
#[tokio::test]
async fn part_numbers_address_the_parts_of_multipart_objects() {
    let s = TestServer::start_with(crate::StoreKind::Memory, |c| c).await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/bkt").send().await.status, 200);
    let one: Vec<u8> = (0..5 << 20).map(|i| (i % 251) as u8).collect();
    let two: Vec<u8> = (0..1000).map(|i| (i % 7) as u8).collect();
    let etag = multipart_object(c, "/bkt/mp", &[&one, &two]).await;
    assert!(etag.ends_with("-2"), "{etag}");
    let total = one.len() + two.len();
    for (method, number, range, data) in [
        ("GET", "1", (0, one.len()), &one),
        ("GET", "2", (one.len(), total), &two),
        ("HEAD", "2", (one.len(), total), &two),
    ] {
        let r = c
            .call(method, "/bkt/mp")
            .query("partNumber", number)
            .send()
            .await;
        assert_eq!(r.status, 206, "{method} part {number}: {}", r.text());
        assert_eq!(r.header("x-amz-mp-parts-count"), "2");
        assert_eq!(
            r.header("content-range"),
            format!("bytes {}-{}/{total}", range.0, range.1 - 1)
        );
        assert_eq!(r.header("content-length"), data.len().to_string());
        assert_eq!(r.header("etag"), format!("\"{etag}\""));
        if method == "GET" {
            assert_eq!(r.body, data[..], "part {number}");
        }
    }
    for method in ["GET", "HEAD"] {
        let past = c
            .call(method, "/bkt/mp")
            .query("partNumber", "3")
            .send()
            .await;
        assert_eq!(past.status, 400, "{method}");
        if method == "GET" {
            assert_eq!(past.code(), "InvalidPart");
        }
    }
    let both = c
        .call("GET", "/bkt/mp")
        .query("partNumber", "1")
        .header("range", "bytes=0-1")
        .send()
        .await;
    assert_eq!((both.status, both.code().as_str()), (400, "InvalidRequest"));
    // A whole GET carries no part count.
    let whole = c.get("/bkt/mp").await;
    assert_eq!(
        (whole.status, whole.header("x-amz-mp-parts-count")),
        (200, "")
    );

    assert_eq!(c.put("/bkt/single", &b"0123456789"[..]).await.status, 200);
    let first = c
        .call("GET", "/bkt/single")
        .query("partNumber", "1")
        .send()
        .await;
    assert_eq!(first.status, 206);
    assert_eq!(first.header("content-range"), "bytes 0-9/10");
    assert_eq!(first.header("x-amz-mp-parts-count"), "");
    assert_eq!(first.body.as_ref(), b"0123456789");
    let second = c
        .call("GET", "/bkt/single")
        .query("partNumber", "2")
        .send()
        .await;
    assert_eq!(
        (second.status, second.code().as_str()),
        (400, "InvalidPart")
    );
}

/// F14: a suffix range of an empty object is the whole (empty) object (200), any other range of it 416 with
/// `Content-Range: bytes */0`; a Range that does not parse, or several, is ignored (200, the whole object) when
/// no signature covers it (presigned URLs, anonymous requests).
#[tokio::test]
async fn range_edges_of_empty_objects_and_unparsable_ranges() {
    let s =
        TestServer::start_with(crate::StoreKind::Memory, |c| c.with_anonymous_read("pub")).await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/pub").send().await.status, 200);
    assert_eq!(c.put("/pub/empty", Vec::new()).await.status, 200);
    let suffix = c
        .call("GET", "/pub/empty")
        .header("range", "bytes=-5")
        .send()
        .await;
    assert_eq!(suffix.status, 200, "{}", suffix.text());
    assert!(suffix.body.is_empty());
    assert_eq!(suffix.header("content-range"), "");
    for range in ["bytes=0-", "bytes=0-0"] {
        let r = c
            .call("GET", "/pub/empty")
            .header("range", range)
            .send()
            .await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (416, "InvalidRange"),
            "{range}"
        );
        assert_eq!(r.header("content-range"), "bytes */0", "{range}");
    }
    let data = b"0123456789".to_vec();
    assert_eq!(c.put("/pub/ten", data.clone()).await.status, 200);
    let unsatisfiable = c
        .call("GET", "/pub/ten")
        .header("range", "bytes=10-")
        .send()
        .await;
    assert_eq!(unsatisfiable.header("content-range"), "bytes */10");

    let presigned = c.presign_get("/pub/ten", SystemTime::now(), Duration::from_secs(60));
    for range in ["bytes=5-2", "bytes=0-1,4-5", "items=0-1", "bytes=abc"] {
        let anonymous = c
            .call("GET", "/pub/ten")
            .anonymous()
            .header("range", range)
            .send()
            .await;
        assert_eq!(
            anonymous.status,
            200,
            "anonymous {range}: {}",
            anonymous.text()
        );
        assert_eq!(anonymous.body, data, "{range}");
        let request = http::Request::get(presigned.as_str())
            .header("host", s.client.addr.to_string())
            .header("range", range)
            .body(http_body_util::BodyExt::boxed(http_body_util::Full::new(
                bytes::Bytes::new(),
            )))
            .expect("request");
        let r = crate::client::send_raw(s.client.addr, request).await;
        assert_eq!(r.status, 200, "presigned {range}: {}", r.text());
        assert_eq!(r.body, data, "{range}");
        assert_eq!(r.header("content-range"), "");
    }
    // A signature that covers the header keeps it (s3s refuses it before any handler: docs/s3.md).
    let signed = c
        .call("GET", "/pub/ten")
        .header("range", "bytes=5-2")
        .send()
        .await;
    assert_eq!(signed.status, 400);
}

/// `response-*` query parameters replace the headers they name on GET and HEAD; an anonymous request may not
/// use them (400 InvalidRequest, as AWS).
#[tokio::test]
async fn response_overrides_replace_headers_for_signed_requests_only() {
    let s =
        TestServer::start_with(crate::StoreKind::Memory, |c| c.with_anonymous_read("pub")).await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/pub").send().await.status, 200);
    let put = c
        .call("PUT", "/pub/report")
        .header("content-type", "text/plain")
        .header("cache-control", "no-cache")
        .body(&b"data"[..])
        .send()
        .await;
    assert_eq!(put.status, 200);
    let overrides = [
        ("response-content-type", "application/pdf", "content-type"),
        (
            "response-content-disposition",
            "attachment; filename=\"r.pdf\"",
            "content-disposition",
        ),
        ("response-content-encoding", "identity", "content-encoding"),
        ("response-content-language", "fr", "content-language"),
        ("response-cache-control", "max-age=5", "cache-control"),
        (
            "response-expires",
            "Wed, 21 Oct 2037 07:28:00 GMT",
            "expires",
        ),
    ];
    for method in ["GET", "HEAD"] {
        let mut call = c.call(method, "/pub/report");
        for (query, value, _) in overrides {
            call = call.query(query, value);
        }
        let r = call.send().await;
        assert_eq!(r.status, 200, "{method}: {}", r.text());
        for (_, value, header) in overrides {
            assert_eq!(r.header(header), value, "{method} {header}");
        }
    }
    let plain = c.get("/pub/report").await;
    assert_eq!(plain.header("content-type"), "text/plain");
    assert_eq!(plain.header("cache-control"), "no-cache");
    let anonymous = c
        .call("GET", "/pub/report")
        .query("response-content-type", "application/pdf")
        .anonymous()
        .send()
        .await;
    assert_eq!(
        (anonymous.status, anonymous.code().as_str()),
        (400, "InvalidRequest")
    );
    let anonymous = c.call("GET", "/pub/report").anonymous().send().await;
    assert_eq!(anonymous.status, 200, "{}", anonymous.text());
}

/// Conditional deletes: DeleteObject's `If-Match`, `x-amz-if-match-size` and
/// `x-amz-if-match-last-modified-time`; the `ETag`, `Size` and `LastModifiedTime` of DeleteObjects entries; a
/// `VersionId` other than `null` refused per entry.
#[tokio::test]
async fn conditional_deletes_delete_only_what_they_name() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let put = c.put("/bkt/k", &b"value"[..]).await;
    let etag = put.header("etag").to_owned();
    let modified = c
        .call("HEAD", "/bkt/k")
        .send()
        .await
        .header("last-modified")
        .to_owned();
    for (header, value) in [
        ("if-match", "\"0123456789abcdef0123456789abcdef\""),
        ("x-amz-if-match-size", "6"),
        (
            "x-amz-if-match-last-modified-time",
            "Wed, 21 Oct 2015 07:28:00 GMT",
        ),
    ] {
        let r = c
            .call("DELETE", "/bkt/k")
            .header(header, value)
            .send()
            .await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (412, "PreconditionFailed"),
            "{header}: {}",
            r.text()
        );
    }
    assert_eq!(
        c.get("/bkt/k").await.status,
        200,
        "refused deletes deleted nothing"
    );
    let r = c
        .call("DELETE", "/bkt/k")
        .header("if-match", &etag)
        .header("x-amz-if-match-size", "5")
        .header("x-amz-if-match-last-modified-time", &modified)
        .send()
        .await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(c.get("/bkt/k").await.status, 404);
    // A key that holds nothing: nothing to delete, 204 under any condition (AWS's API reference, RGW).
    for etag in ["*", "\"0123456789abcdef0123456789abcdef\""] {
        let missing = c
            .call("DELETE", "/bkt/k")
            .header("if-match", etag)
            .send()
            .await;
        assert_eq!(missing.status, 204, "{etag}: {}", missing.text());
    }
    let size_only = c
        .call("DELETE", "/bkt/k")
        .header("x-amz-if-match-size", "5")
        .send()
        .await;
    assert_eq!(size_only.status, 204);
    let null = c
        .call("DELETE", "/bkt/k")
        .query("versionId", "null")
        .send()
        .await;
    assert_eq!(null.status, 204);

    for key in ["d1", "d2", "d3", "d4", "d5"] {
        assert_eq!(c.put(&format!("/bkt/{key}"), &b"abc"[..]).await.status, 200);
    }
    let etag = c
        .call("HEAD", "/bkt/d1")
        .send()
        .await
        .header("etag")
        .to_owned();
    let body = format!(
        "<Delete>\
         <Object><Key>d1</Key><ETag>{etag}</ETag></Object>\
         <Object><Key>d2</Key><ETag>\"0123456789abcdef0123456789abcdef\"</ETag></Object>\
         <Object><Key>d3</Key><Size>4</Size></Object>\
         <Object><Key>d4</Key><VersionId>3HL4kqtJlcpXroDTDmJ</VersionId></Object>\
         <Object><Key>d5</Key><VersionId>null</VersionId><Size>3</Size></Object>\
         <Object><Key>gone</Key><ETag>{etag}</ETag></Object>\
         </Delete>"
    );
    let r = c
        .call("POST", "/bkt")
        .query("delete", "")
        .body(body)
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let text = r.text();
    let deleted = text.split("<Error>").next().unwrap_or_default();
    assert!(
        deleted.contains("<Key>d1</Key>") && deleted.contains("<Key>d5</Key>"),
        "{text}"
    );
    assert!(
        deleted.contains("<Key>gone</Key>"),
        "nothing to delete: {text}"
    );
    for (key, code) in [
        ("d2", "PreconditionFailed"),
        ("d3", "PreconditionFailed"),
        ("d4", "InvalidArgument"),
    ] {
        assert!(
            text.contains(&format!("<Key>{key}</Key><Code>{code}</Code>"))
                || text.contains(&format!("<Code>{code}</Code><Key>{key}</Key>")),
            "{key} {code}: {text}"
        );
    }
    for (key, status) in [
        ("d1", 404),
        ("d2", 200),
        ("d3", 200),
        ("d4", 200),
        ("d5", 404),
    ] {
        assert_eq!(c.get(&format!("/bkt/{key}")).await.status, status, "{key}");
    }
}

/// PutObject over 5 GiB by its Content-Length: 400 EntityTooLarge at once, before a byte of the body is read.
#[tokio::test]
async fn a_put_over_five_gib_is_refused_before_its_body_is_read() {
    let s = TestServer::with_bucket("bkt").await;
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(1);
    let call = s.client.call("PUT", "/bkt/huge").stream(rx, (5 << 30) + 1);
    let reply = tokio::time::timeout(Duration::from_secs(20), call.send())
        .await
        .expect("answered without the body");
    drop(tx);
    assert_eq!(
        (reply.status, reply.code().as_str()),
        (400, "EntityTooLarge"),
        "{}",
        reply.text()
    );
    assert_eq!(s.client.get("/bkt/huge").await.status, 404);
}

/// CopyObject: the source's `versionId` may only be `null`; a source over 5 GiB is refused (400 InvalidRequest,
/// as AWS); the destination's `If-None-Match` and `If-Match` are honoured; a copy of a multipart object gets the
/// MD5 of its bytes as ETag, as AWS gives a single-part copy.
#[tokio::test]
async fn copy_object_checks_source_and_destination_and_computes_a_fresh_etag() {
    let s = TestServer::start_with(crate::StoreKind::Memory, |c| c).await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/bkt").send().await.status, 200);
    let one: Vec<u8> = (0..5 << 20).map(|i| (i % 253) as u8).collect();
    let two = b"the last part".to_vec();
    let etag = multipart_object(c, "/bkt/mp", &[&one, &two]).await;
    let whole = [one.clone(), two.clone()].concat();
    let copy = |source: &str, dst: &str| {
        c.call("PUT", &format!("/bkt/{dst}"))
            .header("x-amz-copy-source", source)
    };
    let r = copy("/bkt/mp?versionId=null", "flat").send().await;
    assert_eq!(r.status, 200, "{}", r.text());
    let fresh = format!("\"{}\"", md5_hex(&whole));
    assert_eq!(r.xml("ETag"), std::slice::from_ref(&fresh));
    assert_ne!(fresh, format!("\"{etag}\""));
    let got = c.get("/bkt/flat").await;
    assert_eq!(
        (got.body.len(), got.header("etag")),
        (whole.len(), fresh.as_str())
    );
    assert!(got.body == whole);

    // The checksums are computed from the bytes too, not carried over: a blob whose stored checksum and ETag
    // are stale (as another client of the store may leave them) gets right ones in its copy.
    let data = b"checksummed bytes".to_vec();
    let mut stale = saltblob::PutOptions::new();
    stale
        .metadata
        .insert("s3:checksum-crc32".to_owned(), "AAAAAA==".to_owned());
    stale.metadata.insert("s3:etag".to_owned(), "0".repeat(32));
    s.store
        .put("s3/o/bkt/stale", data.clone(), &stale)
        .await
        .expect("put");
    let r = copy("/bkt/stale", "fresh").send().await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = c
        .call("GET", "/bkt/fresh")
        .header("x-amz-checksum-mode", "ENABLED")
        .send()
        .await;
    assert_eq!(got.body, data);
    assert_eq!(
        got.header("x-amz-checksum-crc32"),
        crate::client::base64(&crate::client::crc32(&data).to_be_bytes())
    );
    assert_eq!(got.header("etag"), format!("\"{}\"", md5_hex(&data)));

    let r = copy("/bkt/mp?versionId=3HL4kqtJlcpXroDTDmJ", "other")
        .send()
        .await;
    assert_eq!((r.status, r.code().as_str()), (400, "InvalidArgument"));

    // The destination's conditions.
    let r = copy("/bkt/mp", "flat")
        .header("if-none-match", "*")
        .send()
        .await;
    assert_eq!((r.status, r.code().as_str()), (412, "PreconditionFailed"));
    let r = copy("/bkt/mp", "new")
        .header("if-match", &fresh)
        .send()
        .await;
    assert_eq!((r.status, r.code().as_str()), (404, "NoSuchKey"));
    assert_eq!(c.get("/bkt/new").await.status, 404);
    let r = copy("/bkt/mp", "new")
        .header("if-none-match", "*")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = copy("/bkt/mp", "flat")
        .header("if-match", &fresh)
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());

    // A source over 5 GiB: a manifest that says so (no chunk is ever read).
    let small = s.store.head("s3/o/bkt/flat").await.expect("head");
    let size = (5u64 << 30) + 1;
    let huge = saltblob::Manifest {
        size,
        body: saltblob::ManifestBody::Chunked {
            layout: saltblob::ChunkLayout {
                chunk_size: 65_536,
                chunk_count: size.div_ceil(65_536),
                salt_count: 1,
            },
            codec: saltblob::Codec::None,
            stored_bytes: size,
        },
        ..small
    };
    s.store
        .backend()
        .put_record(
            saltblob_core::Namespace::Manifest,
            b"s3/o/bkt/huge",
            huge.encode(),
            &saltblob_core::Precondition::None,
        )
        .await
        .expect("record");
    let head = c.call("HEAD", "/bkt/huge").send().await;
    assert_eq!(
        head.header("content-length"),
        ((5u64 << 30) + 1).to_string()
    );
    let r = copy("/bkt/huge", "copy-of-huge").send().await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "InvalidRequest"),
        "{}",
        r.text()
    );
    assert_eq!(c.get("/bkt/copy-of-huge").await.status, 404);
}

/// A memory store whose manifest writes of keys ending in `-slow` take `delay`, and fail after it for keys
/// ending in `-fail-slow`: a copy that runs longer than the server waits before it answers.
#[derive(Debug)]
struct SlowCommits {
    inner: saltblob_core::MemoryStore,
    delay: Duration,
}

#[async_trait::async_trait]
impl saltblob_core::ChunkStoreLayer for SlowCommits {
    fn inner(&self) -> &dyn saltblob_core::ChunkStore {
        &self.inner
    }

    async fn put_record(
        &self,
        ns: saltblob_core::Namespace,
        key: &[u8],
        value: bytes::Bytes,
        cond: &saltblob_core::Precondition,
    ) -> saltblob_core::Result<saltblob_core::RecordWrite> {
        if ns == saltblob_core::Namespace::Manifest && key.ends_with(b"-slow") {
            tokio::time::sleep(self.delay).await;
            if key.ends_with(b"-fail-slow") {
                return Err(saltblob_core::Error::backend("test", "refused", false));
            }
        }
        let inner: &dyn saltblob_core::ChunkStore = &self.inner;
        inner.put_record(ns, key, value, cond).await
    }
}

/// Sends `request` and returns when its response head came, then each body frame with when it came.
async fn timed(
    addr: std::net::SocketAddr,
    request: http::Request<
        http_body_util::combinators::BoxBody<bytes::Bytes, std::convert::Infallible>,
    >,
) -> (u16, Duration, Vec<(Duration, bytes::Bytes)>) {
    use http_body_util::BodyExt;
    let start = std::time::Instant::now();
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .expect("handshake");
    tokio::spawn(conn);
    let response = sender.send_request(request).await.expect("response");
    let head = start.elapsed();
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let mut frames = Vec::new();
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.expect("frame").into_data() {
            frames.push((start.elapsed(), data));
        }
    }
    (status, head, frames)
}

/// F20: a copy that runs longer than the server waits answers 200 at once and keeps the connection alive with
/// spaces (never a gap near a client's read timeout), then sends its result; a copy that fails after that
/// sends its error in the body, and stores nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_copy_keeps_its_connection_alive_and_reports_in_the_body() {
    let delay = Duration::from_secs(4);
    let backend = std::sync::Arc::new(SlowCommits {
        inner: saltblob_core::MemoryStore::new(),
        delay,
    });
    let store = saltblob::BlobStore::new(backend, saltblob::StoreConfig::default()).expect("store");
    let s = TestServer::start_with(crate::StoreKind::Store(store), |c| c).await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/bkt").send().await.status, 200);
    let put = c.put("/bkt/src", &b"copied slowly"[..]).await;
    assert_eq!(put.status, 200);

    let request = c
        .call("PUT", "/bkt/dst-slow")
        .header("x-amz-copy-source", "/bkt/src")
        .into_request();
    let (status, head, frames) = timed(c.addr, request).await;
    let total = frames.last().map(|(t, _)| *t).unwrap_or(head);
    let mut gaps = vec![head];
    gaps.extend(frames.windows(2).map(|w| w[1].0 - w[0].0));
    let longest = gaps.iter().max().copied().unwrap_or_default();
    println!(
        "kept-alive copy: head after {head:?}, {} frames, longest silence {longest:?}, done after {total:?}",
        frames.len()
    );
    assert_eq!(status, 200);
    assert!(
        head < delay,
        "the response started before the copy ended: {head:?}"
    );
    assert!(total >= delay, "{total:?}");
    assert!(longest < Duration::from_secs(2), "{longest:?}");
    let body: Vec<u8> = frames.iter().flat_map(|(_, d)| d.to_vec()).collect();
    let text = String::from_utf8(body).expect("utf-8");
    assert!(
        text.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n "),
        "{text:?}"
    );
    let etag = put.header("etag");
    assert!(
        text.trim_end()
            .ends_with(&format!("<CopyObjectResult><ETag>{etag}</ETag>"))
            || text.contains(&format!("<ETag>{etag}</ETag>")),
        "{text}"
    );
    assert!(
        text.contains("<CopyObjectResult>") && !text.contains("<Error>"),
        "{text}"
    );
    assert_eq!(c.get("/bkt/dst-slow").await.body.as_ref(), b"copied slowly");

    let request = c
        .call("PUT", "/bkt/dst-fail-slow")
        .header("x-amz-copy-source", "/bkt/src")
        .into_request();
    let (status, head, frames) = timed(c.addr, request).await;
    let text: String = frames
        .iter()
        .map(|(_, d)| String::from_utf8_lossy(d).into_owned())
        .collect();
    assert_eq!(status, 200);
    assert!(head < delay);
    assert!(
        text.contains("<Error><Code>InternalError</Code>") && !text.contains("<CopyObjectResult>"),
        "{text}"
    );
    assert_eq!(
        c.get("/bkt/dst-fail-slow").await.status,
        404,
        "nothing stored"
    );
}

/// F15: an error body carries S3's fixed message, never the store's own (which names the store key
/// `s3/o/<bucket>/<key>` and the store's limits); the detail is for the log.
#[tokio::test]
async fn error_bodies_name_no_store_key() {
    let store = saltblob::BlobStore::new(
        std::sync::Arc::new(saltblob_core::MemoryStore::new()),
        saltblob::StoreConfig::default().with_max_blob_size(1000),
    )
    .expect("store");
    let s = TestServer::start_with(crate::StoreKind::Store(store), |c| c).await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/bkt").send().await.status, 200);
    let r = c.put("/bkt/big", vec![7u8; 2000]).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "EntityTooLarge"),
        "{}",
        r.text()
    );
    let missing = c.get("/nobucket/k").await;
    for r in [r, missing] {
        let text = r.text();
        assert!(!text.contains("s3/") && !text.contains("1000"), "{text}");
        assert!(!r.xml("Message").is_empty(), "{text}");
    }
    assert_eq!(c.get("/bkt/big").await.status, 404);
}
