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
        listed.push_str(&format!(
            "<Part><PartNumber>{n}</PartNumber><ETag>{}</ETag></Part>",
            r.header("etag")
        ));
    }
    let r = c
        .call("POST", "/bkt/mp")
        .query("uploadId", &id)
        .body(format!(
            "<CompleteMultipartUpload>{listed}</CompleteMultipartUpload>"
        ))
        .send()
        .await;
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
