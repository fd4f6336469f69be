//! What a sealed object's metadata shows (issue 59, item 4, found by review): SSE-C and SSE-KMS objects and parts
//! get opaque ETags, and their MD5 and checksums are sealed with them, so that an anonymous listing, or a listing
//! without the key, carries no value derived from the plaintext; a read that gives the key (or, for SSE-KMS, that
//! the store can open) gets the checksums back.

use s3s::crypto::{Checksum, Md5};
use saltblob::{EncryptionConfig, StoreConfig};
use saltblob_core::conformance::encryption::TempKeyring;

use crate::TestServer;
use crate::client::{Call, Client, Reply, base64, crc32, hex};
use crate::sse::sse_c;

fn with_key<'a>(mut call: Call<'a>, key: &[u8]) -> Call<'a> {
    for (name, value) in sse_c("x-amz-", key) {
        call = call.header(&name, &value);
    }
    call
}

fn data(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| ((i + seed) * 37 % 253) as u8).collect()
}

fn md5_hex(bytes: &[u8]) -> String {
    hex(Md5::checksum(bytes).as_ref())
}

fn crc_b64(bytes: &[u8]) -> String {
    base64(&crc32(bytes).to_be_bytes())
}

/// ListObjectsV2 of bucket `bkt`, anonymous.
async fn anonymous_listing(c: &Client) -> Reply {
    c.call("GET", "/bkt")
        .query("list-type", "2")
        .anonymous()
        .send()
        .await
}

/// Asserts that `what` (a response's text, or a manifest's metadata) holds none of `secrets`.
fn shows_none(what: &str, secrets: &[String], context: &str) {
    for secret in secrets {
        assert!(
            !what.contains(secret.as_str()),
            "{context}: shows {secret}: {what}"
        );
    }
}

/// Asserts that the stored metadata of every key under `prefix` holds none of `secrets` in the clear.
async fn stored_shows_none(s: &TestServer, prefix: &str, secrets: &[String]) {
    let entries = s.store.list(prefix).await.expect("list");
    assert!(!entries.is_empty(), "{prefix}");
    for e in entries {
        let m = e.manifest.expect("manifest");
        shows_none(&format!("{:?}", m.metadata), secrets, "stored metadata");
    }
}

/// SSE-C: PutObject and a multipart upload with checksums; anonymous ListObjectsV2 and a ListParts without the
/// key show no MD5 or CRC of the bytes, nor does the store's metadata; the ETags are opaque (another for the
/// same bytes put again), match in conditional reads and in CompleteMultipartUpload; a HEAD or GET with the key
/// and checksum mode ENABLED returns the checksums.
#[tokio::test]
async fn sse_c_listings_show_no_value_derived_from_the_plaintext() {
    let store = saltblob::open("memory://", StoreConfig::default())
        .await
        .expect("open");
    let s = TestServer::start_on(store, |mut c| {
        c.sse_c_over_http = true;
        c.with_anonymous_list("bkt")
    })
    .await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/bkt").send().await.status, 200);
    let key = [0x5Au8; 32];
    let mut secrets = Vec::new();

    // PutObject, inline and chunked.
    for (name, len) in [("small", 300), ("large", 300_000)] {
        let bytes = data(len, 1);
        let (md5, crc) = (md5_hex(&bytes), crc_b64(&bytes));
        let put = |path: String| {
            with_key(c.call("PUT", &path), &key)
                .header("x-amz-checksum-crc32", &crc)
                .body(bytes.clone())
        };
        let r = put(format!("/bkt/{name}")).send().await;
        assert_eq!(r.status, 200, "{}", r.text());
        let etag = r.header("etag").trim_matches('"').to_owned();
        assert_eq!(etag.len(), 32, "{etag}");
        assert_ne!(etag, md5, "the ETag of a sealed object is not its MD5");
        assert_eq!(
            r.header("x-amz-checksum-crc32"),
            crc,
            "the writer gets it back"
        );
        let again = put(format!("/bkt/{name}-again")).send().await;
        assert_ne!(
            again.header("etag").trim_matches('"'),
            etag,
            "the same bytes sealed again have another ETag"
        );

        // With the key: the checksum when asked for, the same ETag, conditions on it.
        let head = |mode: bool| {
            let call = with_key(c.call("HEAD", &format!("/bkt/{name}")), &key);
            if mode {
                call.header("x-amz-checksum-mode", "ENABLED")
            } else {
                call
            }
        };
        let r = head(true).send().await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.header("x-amz-checksum-crc32"), crc);
        assert_eq!(r.header("etag").trim_matches('"'), etag);
        assert_eq!(head(false).send().await.header("x-amz-checksum-crc32"), "");
        let r = with_key(c.call("GET", &format!("/bkt/{name}")), &key)
            .header("x-amz-checksum-mode", "ENABLED")
            .header("if-match", &format!("\"{etag}\""))
            .send()
            .await;
        assert_eq!((r.status, &r.body[..]), (200, &bytes[..]));
        assert_eq!(r.header("x-amz-checksum-crc32"), crc);
        let r = with_key(c.call("GET", &format!("/bkt/{name}")), &key)
            .header("if-none-match", &format!("\"{etag}\""))
            .send()
            .await;
        assert_eq!(r.status, 304);
        let r = with_key(c.call("GET", &format!("/bkt/{name}")), &key)
            .header("if-match", &format!("\"{md5}\""))
            .send()
            .await;
        assert_eq!(r.status, 412, "the MD5 is no ETag of it");
        secrets.extend([md5, crc]);
    }

    // A multipart upload with CRC32 checksums (composite).
    let r = with_key(c.call("POST", "/bkt/mp"), &key)
        .query("uploads", "")
        .header("x-amz-checksum-algorithm", "CRC32")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let id = r.xml("UploadId").remove(0);
    let parts = [data(5 << 20, 2), data(1000, 3)];
    let mut listed = String::new();
    let mut part_etags = Vec::new();
    for (n, bytes) in parts.iter().enumerate() {
        let n = (n + 1).to_string();
        let crc = crc_b64(bytes);
        let r = with_key(c.call("PUT", "/bkt/mp"), &key)
            .query("partNumber", &n)
            .query("uploadId", &id)
            .header("x-amz-checksum-crc32", &crc)
            .body(bytes.clone())
            .send()
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        let etag = r.header("etag").trim_matches('"').to_owned();
        assert_ne!(etag, md5_hex(bytes), "a sealed part's ETag is not its MD5");
        assert_eq!(r.header("x-amz-checksum-crc32"), crc);
        listed.push_str(&format!(
            "<Part><PartNumber>{n}</PartNumber><ETag>\"{etag}\"</ETag><ChecksumCRC32>{crc}</ChecksumCRC32></Part>"
        ));
        part_etags.push(etag);
        secrets.extend([md5_hex(bytes), crc]);
    }
    // ListParts, signed but without the key: the ETags the parts got, no MD5, no checksum.
    let r = c.call("GET", "/bkt/mp").query("uploadId", &id).send().await;
    assert_eq!(r.status, 200, "{}", r.text());
    let shown: Vec<String> = r
        .xml("ETag")
        .iter()
        .map(|e| e.replace("&quot;", "").trim_matches('"').to_owned())
        .collect();
    assert_eq!(shown, part_etags);
    assert!(r.xml("ChecksumCRC32").is_empty(), "{}", r.text());
    shows_none(&r.text(), &secrets, "ListParts");
    stored_shows_none(&s, "s3/u/", &secrets).await;

    // Complete with the part ETags as they were given, and the key (the upload has a checksum).
    let complete = |with: bool| {
        let call = c
            .call("POST", "/bkt/mp")
            .query("uploadId", &id)
            .body(format!(
                "<CompleteMultipartUpload>{listed}</CompleteMultipartUpload>"
            ));
        if with { with_key(call, &key) } else { call }
    };
    let r = complete(false).send().await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "InvalidRequest"),
        "{}",
        r.text()
    );
    let r = complete(true).send().await;
    assert_eq!(r.status, 200, "{}", r.text());
    let etag = r.xml("ETag").remove(0).replace("&quot;", "");
    let etag = etag.trim_matches('"').to_owned();
    assert!(etag.ends_with("-2"), "{etag}");
    let sum = r.xml("ChecksumCRC32").remove(0);
    let r = with_key(c.call("HEAD", "/bkt/mp"), &key)
        .header("x-amz-checksum-mode", "ENABLED")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("etag").trim_matches('"'), etag);
    assert_eq!(r.header("x-amz-checksum-crc32"), sum);
    secrets.push(sum.clone());
    // The plaintext's ETags: the MD5 of the whole, and S3's multipart ETag (the MD5 of the parts' MD5s).
    secrets.push(md5_hex(&parts.concat()));
    let md5s: Vec<u8> = parts
        .iter()
        .flat_map(|p| Md5::checksum(p).as_ref().to_vec())
        .collect();
    secrets.push(md5_hex(&md5s));

    // Anonymous ListObjectsV2: the opaque ETags, nothing else derived from the bytes.
    let r = anonymous_listing(c).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml("Key").len(), 5, "{}", r.text());
    assert!(r.text().contains(&etag), "{}", r.text());
    shows_none(&r.text(), &secrets, "anonymous ListObjectsV2");
    stored_shows_none(&s, "s3/o/bkt/", &secrets).await;
}

/// SSE-KMS (the local provider): the listing shows no MD5 or checksum; a HEAD with checksum mode, which needs no
/// key from the request, gets the checksum (the store opens it).
#[tokio::test]
async fn sse_kms_checksums_are_sealed_and_shown_to_reads() {
    let ring = TempKeyring::new();
    let config = StoreConfig::default().with_encryption(EncryptionConfig::new(ring.provider()));
    let store = saltblob::open("memory://", config).await.expect("open");
    let s = TestServer::start_on(store, |c| {
        c.with_sse_keys(Some("tenant-a".into()), Some("tenant-a".into()))
            .with_anonymous_list("bkt")
    })
    .await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/bkt").send().await.status, 200);
    let bytes = data(200_000, 9);
    let (md5, crc) = (md5_hex(&bytes), crc_b64(&bytes));
    let r = c
        .call("PUT", "/bkt/k")
        .header("x-amz-server-side-encryption", "aws:kms")
        .header("x-amz-checksum-crc32", &crc)
        .body(bytes.clone())
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_ne!(r.header("etag").trim_matches('"'), md5);
    let r = c
        .call("HEAD", "/bkt/k")
        .header("x-amz-checksum-mode", "ENABLED")
        .send()
        .await;
    assert_eq!(
        (r.status, r.header("x-amz-checksum-crc32")),
        (200, crc.as_str())
    );
    let r = anonymous_listing(c).await;
    assert_eq!(r.status, 200, "{}", r.text());
    shows_none(&r.text(), &[md5.clone(), crc.clone()], "anonymous listing");
    stored_shows_none(&s, "s3/o/bkt/", &[md5, crc]).await;
}
