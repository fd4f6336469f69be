//! Server-side encryption: SSE-S3 and SSE-KMS on PutObject, CopyObject and multipart uploads, bucket default
//! encryption, the errors AWS gives; each object checked sealed (or not) in the store's own manifest.

use saltblob::{EncryptionConfig, StoreConfig};
use saltblob_core::conformance::encryption::TempKeyring;

use crate::client::Reply;
use crate::{StoreKind, TestServer};

/// A server on a memory store with `ring`'s keys (tenant-a, tenant-b) and no default store key; SSE-S3 seals
/// under tenant-a, aws:kms without a key id under tenant-b. Bucket `bkt` exists.
async fn sealed(ring: &TempKeyring) -> TestServer {
    let config = StoreConfig::default().with_encryption(EncryptionConfig::new(ring.provider()));
    let store = saltblob::open("memory://", config).await.expect("open");
    let s = TestServer::start_on(store, |c| {
        c.with_sse_keys(Some("tenant-a".into()), Some("tenant-b".into()))
    })
    .await;
    assert_eq!(s.client.call("PUT", "/bkt").send().await.status, 200);
    s
}

/// The key the store sealed `key` of bucket `bkt` under, if any.
async fn sealed_under(s: &TestServer, key: &str) -> Option<String> {
    let m = s
        .store
        .head(format!("s3/o/bkt/{key}"))
        .await
        .expect("stored");
    m.sealed_by().map(|sealing| sealing.kek.name.clone())
}

fn sse(r: &Reply) -> (&str, &str) {
    (
        r.header("x-amz-server-side-encryption"),
        r.header("x-amz-server-side-encryption-aws-kms-key-id"),
    )
}

/// The `<Part>` of CompleteMultipartUpload for part `n`, uploaded with reply `r`.
fn listed_part(n: &str, r: &Reply) -> String {
    format!(
        "<Part><PartNumber>{n}</PartNumber><ETag>{}</ETag></Part>",
        r.header("etag")
    )
}

/// CompleteMultipartUpload of upload `id` of `path` with the parts `listed`.
async fn complete(c: &crate::client::Client, path: &str, id: &str, listed: &str) -> Reply {
    c.call("POST", path)
        .query("uploadId", id)
        .body(format!(
            "<CompleteMultipartUpload>{listed}</CompleteMultipartUpload>"
        ))
        .send()
        .await
}

fn body(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 31 % 251) as u8).collect()
}

#[tokio::test]
async fn sse_s3_and_kms_seal_under_the_key_asked_for() {
    let ring = TempKeyring::new();
    let s = sealed(&ring).await;
    let c = &s.client;
    let data = body(300_000);
    let r = c
        .call("PUT", "/bkt/s3")
        .header("x-amz-server-side-encryption", "AES256")
        .body(data.clone())
        .send()
        .await;
    assert_eq!((r.status, sse(&r)), (200, ("AES256", "")), "{}", r.text());
    assert_eq!(sealed_under(&s, "s3").await.as_deref(), Some("tenant-a"));
    let r = c.get("/bkt/s3").await;
    assert_eq!((&r.body[..], sse(&r)), (&data[..], ("AES256", "")));
    let r = c.call("HEAD", "/bkt/s3").send().await;
    assert_eq!(sse(&r), ("AES256", ""));

    let r = c
        .call("PUT", "/bkt/kms")
        .header("x-amz-server-side-encryption", "aws:kms")
        .header("x-amz-server-side-encryption-aws-kms-key-id", "tenant-a")
        .header("x-amz-server-side-encryption-bucket-key-enabled", "true")
        .body(data.clone())
        .send()
        .await;
    assert_eq!(sse(&r), ("aws:kms", "tenant-a"), "{}", r.text());
    assert_eq!(
        r.header("x-amz-server-side-encryption-bucket-key-enabled"),
        "true"
    );
    let r = c.call("HEAD", "/bkt/kms").send().await;
    assert_eq!(sse(&r), ("aws:kms", "tenant-a"));
    assert_eq!(
        r.header("x-amz-server-side-encryption-bucket-key-enabled"),
        "true"
    );

    let r = c
        .call("PUT", "/bkt/kms-default")
        .header("x-amz-server-side-encryption", "aws:kms")
        .body("x")
        .send()
        .await;
    assert_eq!(sse(&r), ("aws:kms", "tenant-b"));
    assert_eq!(
        sealed_under(&s, "kms-default").await.as_deref(),
        Some("tenant-b")
    );

    let r = c.put("/bkt/plain", "plain").await;
    assert_eq!((r.status, sse(&r)), (200, ("", "")));
    assert_eq!(sealed_under(&s, "plain").await, None);

    // CopyObject: the destination's own choice, not the source's.
    let r = c
        .call("PUT", "/bkt/copy")
        .header("x-amz-copy-source", "/bkt/s3")
        .header("x-amz-server-side-encryption", "aws:kms")
        .header("x-amz-server-side-encryption-aws-kms-key-id", "tenant-b")
        .send()
        .await;
    assert_eq!(
        (r.status, sse(&r)),
        (200, ("aws:kms", "tenant-b")),
        "{}",
        r.text()
    );
    assert_eq!(sealed_under(&s, "copy").await.as_deref(), Some("tenant-b"));
    assert_eq!(&c.get("/bkt/copy").await.body[..], &data[..]);
    let r = c
        .call("PUT", "/bkt/copy-plain")
        .header("x-amz-copy-source", "/bkt/s3")
        .send()
        .await;
    assert_eq!((r.status, sse(&r)), (200, ("", "")));
    assert_eq!(sealed_under(&s, "copy-plain").await, None);
}

#[tokio::test]
async fn refused_requests_store_nothing() {
    let ring = TempKeyring::new();
    let s = sealed(&ring).await;
    let c = &s.client;
    for (headers, code, status) in [
        (
            vec![
                ("x-amz-server-side-encryption", "aws:kms"),
                ("x-amz-server-side-encryption-aws-kms-key-id", "nope"),
            ],
            "KMS.NotFoundException",
            400,
        ),
        (
            vec![("x-amz-server-side-encryption-aws-kms-key-id", "tenant-a")],
            "InvalidArgument",
            400,
        ),
        (
            vec![("x-amz-server-side-encryption", "AES128")],
            "InvalidArgument",
            400,
        ),
        (
            vec![
                ("x-amz-server-side-encryption", "aws:kms"),
                ("x-amz-server-side-encryption-context", "e30="),
            ],
            "NotImplemented",
            501,
        ),
    ] {
        let mut call = c.call("PUT", "/bkt/refused").body("secret".repeat(1000));
        for (k, v) in &headers {
            call = call.header(k, v);
        }
        let r = call.send().await;
        assert_eq!((r.code().as_str(), r.status), (code, status), "{headers:?}");
        if code == "KMS.NotFoundException" {
            assert!(r.text().contains("nope"), "{}", r.text());
        }
        assert!(
            s.store.head("s3/o/bkt/refused").await.is_err(),
            "{headers:?}"
        );
    }
    let r = c
        .call("POST", "/bkt/mp")
        .query("uploads", "")
        .header("x-amz-server-side-encryption", "aws:kms")
        .header("x-amz-server-side-encryption-aws-kms-key-id", "nope")
        .send()
        .await;
    assert_eq!(
        (r.code().as_str(), r.status),
        ("KMS.NotFoundException", 400)
    );
}

#[tokio::test]
async fn a_store_without_key_provider_refuses_sse() {
    let s = TestServer::start_with(StoreKind::Memory, |c| c).await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/bkt").send().await.status, 200);
    let r = c
        .call("PUT", "/bkt/k")
        .header("x-amz-server-side-encryption", "AES256")
        .body("secret")
        .send()
        .await;
    assert_eq!((r.code().as_str(), r.status), ("NotImplemented", 501));
    assert!(s.store.head("s3/o/bkt/k").await.is_err());
}

const DEFAULT_KMS: &str = "<ServerSideEncryptionConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
<Rule><ApplyServerSideEncryptionByDefault><SSEAlgorithm>aws:kms</SSEAlgorithm><KMSMasterKeyID>tenant-b</KMSMasterKeyID>\
</ApplyServerSideEncryptionByDefault><BucketKeyEnabled>true</BucketKeyEnabled></Rule></ServerSideEncryptionConfiguration>";

#[tokio::test]
async fn bucket_default_encryption_applies_to_puts_without_headers() {
    let ring = TempKeyring::new();
    let s = sealed(&ring).await;
    let c = &s.client;
    let get = || c.call("GET", "/bkt").query("encryption", "").send();
    let r = get().await;
    assert_eq!(
        (r.code().as_str(), r.status),
        ("ServerSideEncryptionConfigurationNotFoundError", 404)
    );
    let r = c
        .call("PUT", "/bkt")
        .query("encryption", "")
        .body(DEFAULT_KMS)
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = get().await;
    assert_eq!(r.xml("KMSMasterKeyID"), vec!["tenant-b".to_owned()]);
    assert_eq!(r.xml("SSEAlgorithm"), vec!["aws:kms".to_owned()]);
    // The record is in the store: a second server on the same store applies it.
    assert!(s.store.head("s3/e/bkt").await.is_ok());

    let r = c.put("/bkt/defaulted", "by default").await;
    assert_eq!(sse(&r), ("aws:kms", "tenant-b"));
    assert_eq!(
        r.header("x-amz-server-side-encryption-bucket-key-enabled"),
        "true"
    );
    assert_eq!(
        sealed_under(&s, "defaulted").await.as_deref(),
        Some("tenant-b")
    );
    let r = c
        .call("PUT", "/bkt/own")
        .header("x-amz-server-side-encryption", "AES256")
        .body("own")
        .send()
        .await;
    assert_eq!(sse(&r), ("AES256", ""));
    assert_eq!(sealed_under(&s, "own").await.as_deref(), Some("tenant-a"));

    // A damaged default record fails closed: a put without SSE headers is refused, not stored in plaintext
    // (once the server's 1 s cache of the record has expired).
    s.store
        .put("s3/e/bkt", "damaged", &saltblob::PutOptions::new())
        .await
        .expect("put");
    tokio::time::sleep(std::time::Duration::from_millis(1200)).await;
    let r = c.put("/bkt/while-damaged", "plain?").await;
    assert_eq!(
        (r.code().as_str(), r.status),
        ("InternalError", 500),
        "{}",
        r.text()
    );
    assert!(r.text().contains("PutBucketEncryption"), "{}", r.text());
    assert!(
        s.store.head("s3/o/bkt/while-damaged").await.is_err(),
        "nothing stored"
    );

    let r = c
        .call("DELETE", "/bkt")
        .query("encryption", "")
        .send()
        .await;
    assert_eq!(r.status, 204);
    assert_eq!(get().await.status, 404);
    let r = c.put("/bkt/after", "plain").await;
    assert_eq!(sse(&r), ("", ""));
    assert_eq!(sealed_under(&s, "after").await, None);
}

#[tokio::test]
async fn multipart_parts_are_sealed_as_the_upload_chose() {
    let ring = TempKeyring::new();
    let s = sealed(&ring).await;
    let c = &s.client;
    let r = c
        .call("POST", "/bkt/mp")
        .query("uploads", "")
        .header("x-amz-server-side-encryption", "aws:kms")
        .header("x-amz-server-side-encryption-aws-kms-key-id", "tenant-a")
        .send()
        .await;
    assert_eq!(
        (r.status, sse(&r)),
        (200, ("aws:kms", "tenant-a")),
        "{}",
        r.text()
    );
    let id = r.xml("UploadId").remove(0);
    let parts = [body(5 << 20), body(70_000)];
    let mut listed = String::new();
    for (i, part) in parts.iter().enumerate() {
        let n = (i + 1).to_string();
        let r = c
            .call("PUT", "/bkt/mp")
            .query("partNumber", &n)
            .query("uploadId", &id)
            .body(part.clone())
            .send()
            .await;
        assert_eq!(
            (r.status, sse(&r)),
            (200, ("aws:kms", "tenant-a")),
            "{}",
            r.text()
        );
        listed.push_str(&listed_part(&n, &r));
    }
    let r = complete(c, "/bkt/mp", &id, &listed).await;
    assert_eq!(
        (r.status, sse(&r)),
        (200, ("aws:kms", "tenant-a")),
        "{}",
        r.text()
    );
    let m = s.store.head("s3/o/bkt/mp").await.expect("stored");
    let saltblob::ManifestBody::Segmented(segments) = &m.body else {
        panic!("composed of segments: {:?}", m.body);
    };
    assert_eq!(segments.len(), 2);
    for segment in segments {
        let sealing = segment.sealing.as_ref().expect("each segment sealed");
        assert_eq!(sealing.kek.name, "tenant-a");
    }
    let r = c.get("/bkt/mp").await;
    assert_eq!(sse(&r), ("aws:kms", "tenant-a"));
    assert_eq!(r.body.len(), parts[0].len() + parts[1].len());
    assert!(r.body.starts_with(&parts[0]) && r.body.ends_with(&parts[1]));
}

#[tokio::test]
async fn a_store_default_key_is_sse_s3_as_on_aws() {
    let ring = TempKeyring::new();
    let config = StoreConfig::default()
        .with_encryption(EncryptionConfig::new(ring.provider()).with_key("tenant-a"));
    let store = saltblob::open("memory://", config).await.expect("open");
    let s = TestServer::start_on(store, |c| c).await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/bkt").send().await.status, 200);
    // No headers: sealed under the store's key, which is the SSE-S3 key, so AES256 (as AWS's default).
    let r = c.put("/bkt/k", "by the store").await;
    assert_eq!(sse(&r), ("AES256", ""));
    assert_eq!(sealed_under(&s, "k").await.as_deref(), Some("tenant-a"));
    assert_eq!(sse(&c.call("HEAD", "/bkt/k").send().await), ("AES256", ""));
    let r = c.call("POST", "/bkt/mp").query("uploads", "").send().await;
    assert_eq!((r.status, sse(&r)), (200, ("AES256", "")), "{}", r.text());
    // aws:kms without a key id: the default KMS key, the SSE-S3 key; named as aws:kms.
    let r = c
        .call("PUT", "/bkt/kms")
        .header("x-amz-server-side-encryption", "aws:kms")
        .body("x")
        .send()
        .await;
    assert_eq!(sse(&r), ("aws:kms", "tenant-a"));
    assert_eq!(
        sse(&c.call("HEAD", "/bkt/kms").send().await),
        ("aws:kms", "tenant-a")
    );
    let r = c
        .call("PUT", "/bkt/b")
        .header("x-amz-server-side-encryption", "aws:kms")
        .header("x-amz-server-side-encryption-aws-kms-key-id", "tenant-b")
        .body("x")
        .send()
        .await;
    assert_eq!(sse(&r), ("aws:kms", "tenant-b"));
}

/// An object whose key the server's provider cannot open (another keyring: the key missing, or the same name
/// with other key material) reads as `400 KMS.DisabledException`, naming neither the keyring nor the store;
/// HEAD, which needs no key, still answers with the key the object is sealed under.
#[tokio::test]
async fn an_object_whose_key_is_unavailable_reads_as_kms_disabled() {
    let backend: std::sync::Arc<dyn saltblob::ChunkStore> =
        std::sync::Arc::new(saltblob::MemoryStore::new());
    let ring = TempKeyring::new();
    let writer = saltblob::BlobStore::new(
        std::sync::Arc::clone(&backend),
        StoreConfig::default().with_encryption(EncryptionConfig::new(ring.provider())),
    )
    .expect("writer");
    let dir = tempfile::tempdir().expect("temp dir");
    let other = dir.path().join("other.keyring");
    let mut keyring = saltblob::encryption::Keyring::create(&other).expect("keyring");
    keyring.add("tenant-a", 1).expect("add");
    let provider =
        std::sync::Arc::new(saltblob::encryption::LocalProvider::open(&other).expect("open"));
    let reader = saltblob::BlobStore::new(
        backend,
        StoreConfig::default().with_encryption(EncryptionConfig::new(provider)),
    )
    .expect("reader");
    let s = TestServer::start_on(reader, |c| c).await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/bkt").send().await.status, 200);
    for (key, kek) in [("gone", "tenant-b"), ("other", "tenant-a")] {
        let opts = saltblob::PutOptions::new().with_encryption_key(kek);
        writer
            .put(format!("s3/o/bkt/{key}"), body(100_000), &opts)
            .await
            .expect("sealed put");
        let r = c.get(&format!("/bkt/{key}")).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (400, "KMS.DisabledException"),
            "{key}: {}",
            r.text()
        );
        assert!(!r.text().contains("keyring"), "{}", r.text());
        let r = c.call("HEAD", &format!("/bkt/{key}")).send().await;
        assert_eq!((r.status, sse(&r)), (200, ("aws:kms", kek)));
    }
}

/// The SSE-C headers of `key`: algorithm, the key and its MD5 in base64 (`prefix`: `x-amz-` for the object,
/// `x-amz-copy-source-` for a copy's source).
pub fn sse_c(prefix: &str, key: &[u8]) -> [(String, String); 3] {
    use s3s::crypto::{Checksum, Md5};
    let base = format!("{prefix}server-side-encryption-customer-");
    [
        (format!("{base}algorithm"), "AES256".to_owned()),
        (format!("{base}key"), crate::client::base64(key)),
        (
            format!("{base}key-md5"),
            crate::client::base64(Md5::checksum(key).as_ref()),
        ),
    ]
}

/// A call with the SSE-C headers of `key`.
fn with_key<'a>(
    mut call: crate::client::Call<'a>,
    prefix: &str,
    key: &[u8],
) -> crate::client::Call<'a> {
    for (name, value) in sse_c(prefix, key) {
        call = call.header(&name, &value);
    }
    call
}

fn sse_c_echo(r: &Reply) -> (&str, &str) {
    (
        r.header("x-amz-server-side-encryption-customer-algorithm"),
        r.header("x-amz-server-side-encryption-customer-key-md5"),
    )
}

/// SSE-C on a store without a key provider (`--sse-c-over-http`): PutObject, GetObject (whole, ranges, parts),
/// HeadObject, CopyObject (source and destination keys) and a multipart upload, each sealed under the key given,
/// which is never stored; the errors AWS gives for a missing, wrong, inapplicable or malformed key; a server
/// without TLS or the flag refuses SSE-C.
#[tokio::test]
async fn sse_c_seals_under_the_key_of_each_request() {
    let store = saltblob::open("memory://", StoreConfig::default())
        .await
        .expect("open");
    let s = TestServer::start_on(store, |mut c| {
        c.sse_c_over_http = true;
        c
    })
    .await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/bkt").send().await.status, 200);
    let (key, other) = ([0x11u8; 32], [0x22u8; 32]);
    let md5 = sse_c("x-amz-", &key)[2].1.clone();
    let data = body(300_000);
    for (name, size) in [("small", 100), ("large", data.len())] {
        let r = with_key(c.call("PUT", &format!("/bkt/{name}")), "x-amz-", &key)
            .body(data[..size].to_vec())
            .send()
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(sse_c_echo(&r), ("AES256", md5.as_str()));
        assert_eq!(sse(&r), ("", ""), "SSE-C claims no other encryption");
        let m = s
            .store
            .head(format!("s3/o/bkt/{name}"))
            .await
            .expect("stored");
        let sealing = m.sealed_by().expect("sealed");
        assert_eq!(sealing.kek.provider, "customer");
        assert!(!m.metadata.values().any(|v| v.contains(&md5)), "{m:?}");

        let r = with_key(c.call("GET", &format!("/bkt/{name}")), "x-amz-", &key)
            .send()
            .await;
        assert_eq!(
            (r.status, &r.body[..]),
            (200, &data[..size]),
            "{}",
            r.text()
        );
        assert_eq!(sse_c_echo(&r), ("AES256", md5.as_str()));
        let r = with_key(c.call("GET", &format!("/bkt/{name}")), "x-amz-", &key)
            .header("range", "bytes=10-49")
            .send()
            .await;
        assert_eq!((r.status, &r.body[..]), (206, &data[10..50]));
        let r = with_key(c.call("HEAD", &format!("/bkt/{name}")), "x-amz-", &key)
            .send()
            .await;
        assert_eq!((r.status, sse_c_echo(&r)), (200, ("AES256", md5.as_str())));

        // Without the key 400, with another 403; the ranged path (head first) answers the same.
        for range in [None, Some("bytes=0-9")] {
            let mut call = c.call("GET", &format!("/bkt/{name}"));
            if let Some(range) = range {
                call = call.header("range", range);
            }
            let r = call.send().await;
            assert_eq!(
                (r.status, r.code().as_str()),
                (400, "InvalidRequest"),
                "{range:?}"
            );
            let mut call = with_key(c.call("GET", &format!("/bkt/{name}")), "x-amz-", &other);
            if let Some(range) = range {
                call = call.header("range", range);
            }
            let r = call.send().await;
            assert_eq!(
                (r.status, r.code().as_str()),
                (403, "AccessDenied"),
                "{range:?}"
            );
        }
        assert_eq!(
            c.call("HEAD", &format!("/bkt/{name}")).send().await.status,
            400
        );
        let r = with_key(c.call("HEAD", &format!("/bkt/{name}")), "x-amz-", &other)
            .send()
            .await;
        assert_eq!(r.status, 403);
    }
    // A key for a plaintext object is not applicable: to read it, nor to copy it (the store refuses such a read
    // too, and the server answers as AWS does).
    assert_eq!(c.put("/bkt/plain", "plain").await.status, 200);
    let r = with_key(c.call("GET", "/bkt/plain"), "x-amz-", &key)
        .send()
        .await;
    assert_eq!((r.status, r.code().as_str()), (400, "InvalidRequest"));
    assert!(r.text().contains("not applicable"), "{}", r.text());
    let r = with_key(c.call("PUT", "/bkt/plain-copy"), "x-amz-copy-source-", &key)
        .header("x-amz-copy-source", "/bkt/plain")
        .send()
        .await;
    assert_eq!((r.status, r.code().as_str()), (400, "InvalidRequest"));
    assert!(r.text().contains("not applicable"), "{}", r.text());

    // CopyObject: the source's key to read it, the destination's own (or none: plaintext).
    let r = with_key(
        with_key(c.call("PUT", "/bkt/copy"), "x-amz-copy-source-", &key),
        "x-amz-",
        &other,
    )
    .header("x-amz-copy-source", "/bkt/large")
    .send()
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = with_key(c.call("GET", "/bkt/copy"), "x-amz-", &other)
        .send()
        .await;
    assert_eq!(&r.body[..], &data[..]);
    let r = c
        .call("PUT", "/bkt/copy-plain")
        .header("x-amz-copy-source", "/bkt/large")
        .send()
        .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "InvalidRequest"),
        "the source's key is needed"
    );
    let r = with_key(c.call("PUT", "/bkt/copy-plain"), "x-amz-copy-source-", &key)
        .header("x-amz-copy-source", "/bkt/large")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(&c.get("/bkt/copy-plain").await.body[..], &data[..]);

    // A multipart upload: every part must carry the upload's key.
    let r = with_key(c.call("POST", "/bkt/mp"), "x-amz-", &key)
        .query("uploads", "")
        .send()
        .await;
    assert_eq!(
        (r.status, sse_c_echo(&r)),
        (200, ("AES256", md5.as_str())),
        "{}",
        r.text()
    );
    let id = r.xml("UploadId").remove(0);
    let part = |n: &str, k: Option<&[u8]>| {
        let call = c
            .call("PUT", "/bkt/mp")
            .query("partNumber", n)
            .query("uploadId", &id)
            .body(body(5 << 20));
        match k {
            Some(k) => with_key(call, "x-amz-", k),
            None => call,
        }
    };
    let r = part("1", None).send().await;
    assert_eq!((r.status, r.code().as_str()), (400, "InvalidRequest"));
    let r = part("1", Some(&other)).send().await;
    assert_eq!((r.status, r.code().as_str()), (400, "InvalidRequest"));
    let mut listed = String::new();
    for n in ["1", "2"] {
        let r = part(n, Some(&key)).send().await;
        assert_eq!(
            (r.status, sse_c_echo(&r)),
            (200, ("AES256", md5.as_str())),
            "{}",
            r.text()
        );
        listed.push_str(&listed_part(n, &r));
    }
    let r = complete(c, "/bkt/mp", &id, &listed).await;
    assert_eq!((r.status, sse(&r)), (200, ("", "")), "{}", r.text());
    let r = with_key(c.call("GET", "/bkt/mp"), "x-amz-", &key)
        .send()
        .await;
    assert_eq!(r.body.len(), 10 << 20);
    assert_eq!(&r.body[..5 << 20], &body(5 << 20)[..]);
    assert_eq!(c.call("GET", "/bkt/mp").send().await.status, 400);
    let r = with_key(c.call("GET", "/bkt/mp"), "x-amz-", &key)
        .query("partNumber", "2")
        .send()
        .await;
    assert_eq!((r.status, r.body.len()), (206, 5 << 20));

    // Malformed headers, and SSE-C with SSE-S3: refused, nothing stored.
    let [algorithm, key_header, md5_header] = sse_c("x-amz-", &key);
    let short = crate::client::base64(&[1; 16]);
    let bad_md5 = crate::client::base64(&[0; 16]);
    for (headers, code) in [
        (
            vec![
                (&algorithm.0, "AES128"),
                (&key_header.0, &key_header.1),
                (&md5_header.0, &md5_header.1),
            ],
            "InvalidEncryptionAlgorithmError",
        ),
        (
            vec![(&algorithm.0, "AES256"), (&md5_header.0, &md5_header.1)],
            "InvalidArgument",
        ),
        (
            vec![(&algorithm.0, "AES256"), (&key_header.0, &key_header.1)],
            "InvalidArgument",
        ),
        (
            vec![
                (&key_header.0, &key_header.1),
                (&md5_header.0, &md5_header.1),
            ],
            "InvalidArgument",
        ),
        (
            vec![
                (&algorithm.0, "AES256"),
                (&key_header.0, &short),
                (&md5_header.0, &md5_header.1),
            ],
            "InvalidArgument",
        ),
        (
            vec![
                (&algorithm.0, "AES256"),
                (&key_header.0, &key_header.1),
                (&md5_header.0, &bad_md5),
            ],
            "InvalidArgument",
        ),
    ] {
        let mut call = c.call("PUT", "/bkt/refused").body("secret");
        for (name, value) in &headers {
            call = call.header(name, value);
        }
        let r = call.send().await;
        assert_eq!((r.status, r.code().as_str()), (400, code), "{headers:?}");
    }
    let r = with_key(c.call("PUT", "/bkt/refused"), "x-amz-", &key)
        .header("x-amz-server-side-encryption", "AES256")
        .body("secret")
        .send()
        .await;
    assert_eq!((r.status, r.code().as_str()), (400, "InvalidArgument"));
    assert!(
        s.store.head("s3/o/bkt/refused").await.is_err(),
        "nothing stored"
    );

    // Without TLS and without --sse-c-over-http, SSE-C is refused (the key would cross the network in clear).
    let plain = TestServer::start_with(StoreKind::Memory, |c| c).await;
    assert_eq!(plain.client.call("PUT", "/bkt").send().await.status, 200);
    let r = with_key(plain.client.call("PUT", "/bkt/k"), "x-amz-", &key)
        .body("secret")
        .send()
        .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "InvalidRequest"),
        "{}",
        r.text()
    );
    assert_eq!(plain.client.call("HEAD", "/bkt/k").send().await.status, 404);
}
