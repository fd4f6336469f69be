//! Bodies are verified as they stream: Content-MD5, `x-amz-checksum-*` (in headers and in `aws-chunked`
//! trailers) and the signed payload hash; a mismatch is the S3 error a client expects and stores nothing.

use crate::TestServer;
use crate::client::{base64, crc32};

/// An `aws-chunked` body (STREAMING-UNSIGNED-PAYLOAD-TRAILER) of `data` in `chunk`-byte chunks, with the
/// trailer `x-amz-checksum-crc32: checksum`.
fn aws_chunked(data: &[u8], chunk: usize, checksum: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for part in data.chunks(chunk) {
        out.extend_from_slice(format!("{:x}\r\n", part.len()).as_bytes());
        out.extend_from_slice(part);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("0\r\nx-amz-checksum-crc32:{checksum}\r\n\r\n").as_bytes());
    out
}

#[tokio::test]
async fn content_md5_is_verified_and_a_mismatch_stores_nothing() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let data = vec![9u8; 100_000];
    let md5 = {
        use s3s::crypto::Checksum as _;
        s3s::crypto::Md5::checksum(&data)
    };
    let good = c
        .call("PUT", "/bkt/ok")
        .header("content-md5", &base64(&md5))
        .body(data.clone())
        .send()
        .await;
    assert_eq!(good.status, 200, "{}", good.text());
    let mut wrong = md5;
    wrong[0] ^= 1;
    for (key, len) in [("bad-small", 10usize), ("bad-large", 9 << 20)] {
        let body = vec![9u8; len];
        let r = c
            .call("PUT", &format!("/bkt/{key}"))
            .header("content-md5", &base64(&wrong))
            .body(body)
            .send()
            .await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "BadDigest"),
            "{key}: {}",
            r.text()
        );
        let get = c.get(&format!("/bkt/{key}")).await;
        assert_eq!(get.status, 404, "{key}: nothing stored");
    }
    let r = c
        .call("PUT", "/bkt/x")
        .header("content-md5", "not base64!")
        .body(&b"x"[..])
        .send()
        .await;
    assert_eq!((r.status, r.code().as_str()), (400, "InvalidDigest"));
    // A failed overwrite leaves the previous version.
    let r = c
        .call("PUT", "/bkt/ok")
        .header("content-md5", &base64(&wrong))
        .body(data.clone())
        .send()
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(c.get("/bkt/ok").await.body, data);
}

#[tokio::test]
async fn checksum_headers_are_verified_stored_and_returned() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let data = b"checksummed body".to_vec();
    let sum = base64(&crc32(&data).to_be_bytes());
    let r = c
        .call("PUT", "/bkt/k")
        .header("x-amz-checksum-crc32", &sum)
        .body(data.clone())
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-amz-checksum-crc32"), sum);
    let got = c
        .call("GET", "/bkt/k")
        .header("x-amz-checksum-mode", "ENABLED")
        .send()
        .await;
    assert_eq!(got.header("x-amz-checksum-crc32"), sum);
    let bad = base64(&(crc32(&data) ^ 1).to_be_bytes());
    let r = c
        .call("PUT", "/bkt/k2")
        .header("x-amz-checksum-crc32", &bad)
        .body(data)
        .send()
        .await;
    assert_eq!((r.status, r.code().as_str()), (400, "BadDigest"));
    assert_eq!(c.get("/bkt/k2").await.status, 404);
}

#[tokio::test]
async fn aws_chunked_bodies_with_trailing_checksums() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    let sum = base64(&crc32(&data).to_be_bytes());
    let put = |key: &'static str, body: Vec<u8>| {
        c.call("PUT", key)
            .payload("STREAMING-UNSIGNED-PAYLOAD-TRAILER")
            .header("content-encoding", "aws-chunked")
            .header("x-amz-decoded-content-length", &data.len().to_string())
            .header("x-amz-trailer", "x-amz-checksum-crc32")
            .body(body)
            .send()
    };
    let r = put("/bkt/chunked", aws_chunked(&data, 65_536, &sum)).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let got = c
        .call("GET", "/bkt/chunked")
        .header("x-amz-checksum-mode", "ENABLED")
        .send()
        .await;
    assert_eq!(got.body, data);
    assert_eq!(got.header("x-amz-checksum-crc32"), sum);

    let bad = base64(&(crc32(&data) ^ 1).to_be_bytes());
    let r = put("/bkt/chunked-bad", aws_chunked(&data, 65_536, &bad)).await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "BadDigest"),
        "{}",
        r.text()
    );
    assert_eq!(c.get("/bkt/chunked-bad").await.status, 404);
}

#[tokio::test]
async fn a_payload_that_does_not_match_its_signed_hash_stores_nothing() {
    let s = TestServer::with_bucket("bkt").await;
    // The SHA-256 of the empty body, sent with a non-empty one.
    let r = s
        .client
        .call("PUT", "/bkt/k")
        .payload("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        .body(&b"not empty"[..])
        .send()
        .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "XAmzContentSHA256Mismatch"),
        "{}",
        r.text()
    );
    assert_eq!(s.client.get("/bkt/k").await.status, 404);
}
