//! Access keys kept in the store (`saltblob_server::create_key`, `allow`, …) tried as attackers: a key with no
//! grant on a bucket tries every S3 operation the server implements on it, a read-only key tries every write;
//! each is refused with 403 AccessDenied and nothing changes.

use std::time::Duration;

use saltblob::{EncryptionConfig, StoreConfig};
use saltblob_core::conformance::encryption::TempKeyring;
use saltblob_server::Right;

use crate::client::{Client, Reply};
use crate::{ACCESS_KEY, TestServer};

/// One request, as an attacker sends it.
pub(crate) struct Attempt {
    pub(crate) op: &'static str,
    method: &'static str,
    path: String,
    query: Vec<(&'static str, String)>,
    headers: Vec<(&'static str, String)>,
    body: &'static str,
}

fn attempt(op: &'static str, method: &'static str, path: &str) -> Attempt {
    Attempt {
        op,
        method,
        path: path.to_owned(),
        query: Vec::new(),
        headers: Vec::new(),
        body: "",
    }
}

impl Attempt {
    fn q(mut self, key: &'static str, value: &str) -> Self {
        self.query.push((key, value.to_owned()));
        self
    }

    fn h(mut self, key: &'static str, value: &str) -> Self {
        self.headers.push((key, value.to_owned()));
        self
    }

    fn b(mut self, body: &'static str) -> Self {
        self.body = body;
        self
    }

    async fn send(&self, client: &Client) -> Reply {
        self.send_as(client, false).await
    }

    /// Sends it signed by `client`, or with no signature when `anonymous`.
    pub(crate) async fn send_as(&self, client: &Client, anonymous: bool) -> Reply {
        let mut call = client.call(self.method, &self.path);
        if anonymous {
            call = call.anonymous();
        }
        for (k, v) in &self.query {
            call = call.query(k, v);
        }
        for (k, v) in &self.headers {
            call = call.header(k, v);
        }
        call.body(self.body).send().await
    }
}

/// Every operation the server implements on bucket `b` (object `b/secret.txt`, multipart upload `upload` of
/// `b/big`), but ListBuckets and CreateBucket (tried apart), with the right each needs.
pub(crate) fn every_operation(b: &str, upload: &str) -> Vec<(Right, Attempt)> {
    let bucket = format!("/{b}");
    let object = format!("/{b}/secret.txt");
    let big = format!("/{b}/big");
    let source = format!("{b}/secret.txt");
    let lifecycle = "<LifecycleConfiguration><Rule><ID>r</ID><Filter><Prefix></Prefix></Filter>\
        <Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule></LifecycleConfiguration>";
    let encryption = "<ServerSideEncryptionConfiguration><Rule><ApplyServerSideEncryptionByDefault>\
        <SSEAlgorithm>AES256</SSEAlgorithm></ApplyServerSideEncryptionByDefault></Rule>\
        </ServerSideEncryptionConfiguration>";
    let tags = "<Tagging><TagSet><Tag><Key>k</Key><Value>v</Value></Tag></TagSet></Tagging>";
    let cors = "<CORSConfiguration><CORSRule><AllowedMethod>GET</AllowedMethod>\
        <AllowedOrigin>*</AllowedOrigin></CORSRule></CORSConfiguration>";
    use Right::{Owner, Read, Write};
    vec![
        (Read, attempt("HeadBucket", "HEAD", &bucket)),
        (
            Read,
            attempt("GetBucketLocation", "GET", &bucket).q("location", ""),
        ),
        (
            Read,
            attempt("GetBucketVersioning", "GET", &bucket).q("versioning", ""),
        ),
        (Read, attempt("GetObject", "GET", &object)),
        (
            Read,
            attempt("GetObjectAttributes", "GET", &object)
                .q("attributes", "")
                .h("x-amz-object-attributes", "ETag,ObjectSize"),
        ),
        (Read, attempt("HeadObject", "HEAD", &object)),
        (Read, attempt("ListObjects", "GET", &bucket)),
        (
            Read,
            attempt("ListObjectsV2", "GET", &bucket).q("list-type", "2"),
        ),
        (
            Read,
            attempt("ListObjectVersions", "GET", &bucket).q("versions", ""),
        ),
        (
            Read,
            attempt("ListParts", "GET", &big).q("uploadId", upload),
        ),
        (
            Read,
            attempt("ListMultipartUploads", "GET", &bucket).q("uploads", ""),
        ),
        (Read, attempt("GetObjectAcl", "GET", &object).q("acl", "")),
        (
            Read,
            attempt("GetObjectTagging", "GET", &object).q("tagging", ""),
        ),
        (Read, attempt("GetBucketAcl", "GET", &bucket).q("acl", "")),
        (
            Read,
            attempt("GetBucketOwnershipControls", "GET", &bucket).q("ownershipControls", ""),
        ),
        (
            Read,
            attempt("GetBucketRequestPayment", "GET", &bucket).q("requestPayment", ""),
        ),
        (
            Read,
            attempt("GetBucketPolicy", "GET", &bucket).q("policy", ""),
        ),
        (Read, attempt("GetBucketCors", "GET", &bucket).q("cors", "")),
        (
            Read,
            attempt("GetBucketTagging", "GET", &bucket).q("tagging", ""),
        ),
        (
            Read,
            attempt("GetPublicAccessBlock", "GET", &bucket).q("publicAccessBlock", ""),
        ),
        (
            Read,
            attempt("GetObjectLockConfiguration", "GET", &bucket).q("object-lock", ""),
        ),
        (
            Read,
            attempt("GetBucketLifecycleConfiguration", "GET", &bucket).q("lifecycle", ""),
        ),
        (
            Read,
            attempt("GetBucketEncryption", "GET", &bucket).q("encryption", ""),
        ),
        (
            Write,
            attempt("PutObject", "PUT", &format!("/{b}/planted")).b("x"),
        ),
        (
            Write,
            attempt("PutObject (over)", "PUT", &object).b("overwritten"),
        ),
        (Write, attempt("DeleteObject", "DELETE", &object)),
        (
            Write,
            attempt("DeleteObjects", "POST", &bucket)
                .q("delete", "")
                .b("<Delete><Object><Key>secret.txt</Key></Object></Delete>"),
        ),
        (
            Write,
            attempt("CopyObject", "PUT", &format!("/{b}/copy")).h("x-amz-copy-source", &source),
        ),
        (
            Write,
            attempt("CreateMultipartUpload", "POST", &format!("/{b}/new")).q("uploads", ""),
        ),
        (
            Write,
            attempt("UploadPart", "PUT", &big)
                .q("partNumber", "1")
                .q("uploadId", upload)
                .b("part"),
        ),
        (
            Write,
            attempt("UploadPartCopy", "PUT", &big)
                .q("partNumber", "2")
                .q("uploadId", upload)
                .h("x-amz-copy-source", &source),
        ),
        (
            Write,
            attempt("CompleteMultipartUpload", "POST", &big)
                .q("uploadId", upload)
                .b("<CompleteMultipartUpload></CompleteMultipartUpload>"),
        ),
        (
            Write,
            attempt("AbortMultipartUpload", "DELETE", &big).q("uploadId", upload),
        ),
        (
            Write,
            attempt("PutObjectAcl", "PUT", &object)
                .q("acl", "")
                .h("x-amz-acl", "public-read"),
        ),
        (Owner, attempt("DeleteBucket", "DELETE", &bucket)),
        (
            Owner,
            attempt("PutBucketLifecycleConfiguration", "PUT", &bucket)
                .q("lifecycle", "")
                .b(lifecycle),
        ),
        (
            Owner,
            attempt("DeleteBucketLifecycle", "DELETE", &bucket).q("lifecycle", ""),
        ),
        (
            Owner,
            attempt("PutBucketEncryption", "PUT", &bucket)
                .q("encryption", "")
                .b(encryption),
        ),
        (
            Owner,
            attempt("DeleteBucketEncryption", "DELETE", &bucket).q("encryption", ""),
        ),
        (
            Owner,
            attempt("PutBucketAcl", "PUT", &bucket)
                .q("acl", "")
                .h("x-amz-acl", "public-read"),
        ),
        (
            Owner,
            attempt("PutBucketCors", "PUT", &bucket)
                .q("cors", "")
                .b(cors),
        ),
        (
            Write,
            attempt("PutObjectTagging", "PUT", &object)
                .q("tagging", "")
                .b(tags),
        ),
        (
            Write,
            attempt("DeleteObjectTagging", "DELETE", &object).q("tagging", ""),
        ),
        (
            Owner,
            attempt("PutBucketTagging", "PUT", &bucket)
                .q("tagging", "")
                .b(tags),
        ),
        (
            Owner,
            attempt("DeleteBucketTagging", "DELETE", &bucket).q("tagging", ""),
        ),
        (
            Owner,
            attempt("DeleteBucketCors", "DELETE", &bucket).q("cors", ""),
        ),
        (
            Owner,
            attempt("PutBucketVersioning", "PUT", &bucket)
                .q("versioning", "")
                .b("<VersioningConfiguration><Status>Enabled</Status></VersioningConfiguration>"),
        ),
    ]
}

/// A server on a store sealed under `ring`'s tenant-a, with bucket `victim` holding `secret.txt` and a multipart
/// upload of `big` in progress (its id returned), all made by the root key.
pub(crate) async fn victim(ring: &TempKeyring) -> (TestServer, String) {
    let config = StoreConfig::default()
        .with_encryption(EncryptionConfig::new(ring.provider()).with_key("tenant-a"));
    let store = saltblob::open("memory://", config).await.expect("open");
    let s = TestServer::start_on(store, |c| c).await;
    assert_eq!(s.client.call("PUT", "/victim").send().await.status, 200);
    assert_eq!(
        s.client
            .put("/victim/secret.txt", "the secret")
            .await
            .status,
        200
    );
    let r = s
        .client
        .call("POST", "/victim/big")
        .query("uploads", "")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let upload = r.xml("UploadId").into_iter().next().expect("an upload id");
    (s, upload)
}

/// A client signing with a key kept in the store, made with `may_create_buckets`.
pub(crate) async fn stored_key(s: &TestServer, name: &str, may_create_buckets: bool) -> Client {
    let key = saltblob_server::create_key(&s.store, name, may_create_buckets, None)
        .await
        .expect("create key");
    Client {
        access_key: key.id.clone(),
        secret: key.secret.to_string(),
        ..s.client.clone()
    }
}

/// What the root key sees of bucket `victim`: its objects, the secret's bytes, the uploads, its settings.
pub(crate) async fn victim_state(s: &TestServer) -> Vec<String> {
    let mut state = Vec::new();
    for (path, query) in [
        ("/victim", ("list-type", "2")),
        ("/victim", ("uploads", "")),
        ("/victim", ("lifecycle", "")),
        ("/victim", ("encryption", "")),
        ("/victim", ("cors", "")),
        ("/victim", ("tagging", "")),
        ("/victim/secret.txt", ("tagging", "")),
        ("/victim", ("acl", "")),
        ("/victim/secret.txt", ("acl", "")),
        ("/victim", ("versioning", "")),
    ] {
        let r = s
            .client
            .call("GET", path)
            .query(query.0, query.1)
            .send()
            .await;
        // The request ids and dates differ from call to call.
        state.push(format!(
            "{} {:?} {:?} {:?} {:?}",
            r.status,
            r.xml("Key"),
            r.xml("URI"),
            r.xml("Status"),
            r.code()
        ));
    }
    let r = s.client.get("/victim/secret.txt").await;
    state.push(format!("{} {}", r.status, r.text()));
    state
}

/// A bucket open to anonymous reads (`--anonymous-read`) is open to every stored key too, as on AWS: a key without
/// a grant on it reads what anyone may, and is still refused a write.
#[tokio::test]
async fn a_stored_key_reads_what_anyone_may() {
    let ring = TempKeyring::new();
    let config = StoreConfig::default()
        .with_encryption(EncryptionConfig::new(ring.provider()).with_key("tenant-a"));
    let store = saltblob::open("memory://", config).await.expect("open");
    let s = TestServer::start_on(store, |c| c.with_anonymous_read("public")).await;
    assert_eq!(s.client.call("PUT", "/public").send().await.status, 200);
    assert_eq!(
        s.client.put("/public/readme.txt", "hello").await.status,
        200
    );
    let reader = stored_key(&s, "reader", false).await;
    let r = reader.get("/public/readme.txt").await;
    assert_eq!((r.status, r.text()), (200, "hello".to_owned()));
    assert_eq!(reader.put("/public/other.txt", "no").await.status, 403);
    assert_eq!(
        s.client.get("/public/other.txt").await.status,
        404,
        "nothing written"
    );
}

#[tokio::test]
async fn a_key_without_a_grant_is_refused_every_operation_and_changes_nothing() {
    let ring = TempKeyring::new();
    let (s, upload) = victim(&ring).await;
    let before = victim_state(&s).await;
    let mallory = stored_key(&s, "mallory", true).await;
    // Mallory may create buckets, and owns the one it creates: the grant is in place for its next request.
    let r = mallory.call("PUT", "/mallory-own").send().await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(mallory.put("/mallory-own/mine", "mine").await.status, 200);
    let mut allowed = Vec::new();
    let ops = every_operation("victim", &upload);
    for (_, a) in &ops {
        let r = a.send(&mallory).await;
        if (r.status, r.code().as_str()) != (403, "AccessDenied")
            && !(a.method == "HEAD" && r.status == 403)
        {
            allowed.push(format!("{}: {} {}", a.op, r.status, r.text()));
        }
    }
    // Copies from the victim into Mallory's own bucket: refused for want of `read` on the source.
    let r = mallory
        .call("PUT", "/mallory-own/stolen")
        .header("x-amz-copy-source", "victim/secret.txt")
        .send()
        .await;
    if r.status != 403 {
        allowed.push(format!("CopyObject from victim: {} {}", r.status, r.text()));
    }
    let r = mallory
        .call("POST", "/mallory-own/big")
        .query("uploads", "")
        .send()
        .await;
    let own_upload = r.xml("UploadId").into_iter().next().expect("an upload id");
    let r = mallory
        .call("PUT", "/mallory-own/big")
        .query("partNumber", "1")
        .query("uploadId", &own_upload)
        .header("x-amz-copy-source", "/victim/secret.txt")
        .send()
        .await;
    if r.status != 403 {
        allowed.push(format!(
            "UploadPartCopy from victim: {} {}",
            r.status,
            r.text()
        ));
    }
    // CreateBucket of a bucket that exists, by a key that does not own it: refused, the bucket untouched.
    let r = mallory.call("PUT", "/victim").send().await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (409, "BucketAlreadyExists"),
        "{}",
        r.text()
    );
    assert!(
        allowed.is_empty(),
        "allowed without a grant ({} of {} operations): {allowed:#?}",
        allowed.len(),
        ops.len() + 2
    );
    assert_eq!(victim_state(&s).await, before);
    // ListBuckets lists Mallory's bucket only; the root key's, both.
    let r = mallory.get("/").await;
    assert_eq!(r.xml("Name"), ["mallory-own"], "{}", r.text());
    assert_eq!(
        s.client.get("/").await.xml("Name"),
        ["mallory-own", "victim"]
    );
    // A key that may not create buckets may not.
    let eve = stored_key(&s, "eve", false).await;
    let r = eve.call("PUT", "/eve-own").send().await;
    assert_eq!((r.status, r.code().as_str()), (403, "AccessDenied"));
    assert_eq!(s.client.call("HEAD", "/eve-own").send().await.status, 404);
}

#[tokio::test]
async fn a_read_only_grant_reads_and_is_refused_every_write() {
    let ring = TempKeyring::new();
    let (s, upload) = victim(&ring).await;
    let before = victim_state(&s).await;
    let reader = stored_key(&s, "reader", false).await;
    saltblob_server::allow(&s.store, &reader.access_key, "victim", Right::Read)
        .await
        .expect("allow");
    let mut wrong = Vec::new();
    for (need, a) in every_operation("victim", &upload) {
        let r = a.send(&reader).await;
        let denied = r.status == 403;
        if denied != (need > Right::Read) {
            wrong.push(format!(
                "{} (needs {need}): {} {}",
                a.op,
                r.status,
                r.text()
            ));
        }
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
    assert_eq!(victim_state(&s).await, before);
    assert_eq!(reader.get("/victim/secret.txt").await.text(), "the secret");
    // Write on the bucket: objects change, the bucket's settings do not.
    saltblob_server::allow(&s.store, &reader.access_key, "victim", Right::Write)
        .await
        .expect("allow");
    tokio::time::sleep(saltblob_server::GRANTS_CACHED_FOR).await;
    assert_eq!(reader.put("/victim/new", "n").await.status, 200);
    let r = reader
        .call("DELETE", "/victim")
        .query("lifecycle", "")
        .send()
        .await;
    assert_eq!(r.status, 403);
}

#[tokio::test]
async fn grants_end_with_their_bucket_and_keys_end_when_deleted() {
    let ring = TempKeyring::new();
    let (s, _) = victim(&ring).await;
    let user = stored_key(&s, "user", false).await;
    let id = user.access_key.clone();
    saltblob_server::allow(&s.store, &id, "victim", Right::Owner)
        .await
        .expect("allow");
    assert_eq!(user.get("/victim/secret.txt").await.status, 200);
    // A grant names a bucket that exists; a right is one of three.
    let err = saltblob_server::allow(&s.store, &id, "nobucket", Right::Read)
        .await
        .expect_err("no such bucket");
    assert!(
        err.to_string().contains("there is no bucket \"nobucket\""),
        "{err}"
    );
    // The bucket deleted and made again: a new bucket, which the old grant does not reach.
    assert_eq!(s.client.delete("/victim/secret.txt").await.status, 204);
    // Its upload in progress aborted, then the bucket is empty.
    let uploads = s
        .client
        .call("GET", "/victim")
        .query("uploads", "")
        .send()
        .await;
    for (key, upload) in uploads.xml("Key").iter().zip(uploads.xml("UploadId")) {
        let r = s
            .client
            .call("DELETE", &format!("/victim/{key}"))
            .query("uploadId", &upload)
            .send()
            .await;
        assert_eq!(r.status, 204);
    }
    let r = s.client.call("DELETE", "/victim").send().await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(s.client.call("PUT", "/victim").send().await.status, 200);
    tokio::time::sleep(saltblob_server::GRANTS_CACHED_FOR).await;
    let r = user.call("HEAD", "/victim").send().await;
    assert_eq!(r.status, 403);
    let listed = saltblob_server::list_keys(&s.store).await.expect("list");
    let grants = &listed.iter().find(|k| k.id == id).expect("listed").grants;
    assert!(grants[0].stale, "{grants:?}");
    // Deleted: refused from the next request after the cache's second, and the root key is untouched.
    saltblob_server::allow(&s.store, &id, "victim", Right::Read)
        .await
        .expect("allow");
    tokio::time::sleep(saltblob_server::GRANTS_CACHED_FOR).await;
    assert_eq!(user.call("HEAD", "/victim").send().await.status, 200);
    saltblob_server::delete_key(&s.store, &id)
        .await
        .expect("delete");
    tokio::time::sleep(saltblob_server::GRANTS_CACHED_FOR + Duration::from_millis(50)).await;
    let r = user.get("/victim").await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (403, "InvalidAccessKeyId"),
        "{}",
        r.text()
    );
    assert_eq!(s.client.get("/victim").await.status, 200);
    let err = saltblob_server::delete_key(&s.store, &id)
        .await
        .expect_err("gone");
    assert!(matches!(err, saltblob::Error::NotFound { .. }), "{err}");
    assert_eq!(s.client.access_key, ACCESS_KEY);
}

#[tokio::test]
async fn secrets_are_kept_sealed_and_a_store_without_a_key_refuses_to_make_one() {
    let ring = TempKeyring::new();
    let (s, _) = victim(&ring).await;
    let key = saltblob_server::create_key(&s.store, "sealed", false, None)
        .await
        .expect("create");
    let m = s
        .store
        .head(format!("s3/k/{}", key.id))
        .await
        .expect("stored");
    assert_eq!(
        m.sealed_by().map(|sealing| sealing.kek.name.clone()),
        Some("tenant-a".to_owned())
    );
    assert!(!format!("{key:?}").contains(key.secret.as_str()));
    // A store whose provider has no default key: a key names the one to seal under, or none is made.
    let config = StoreConfig::default().with_encryption(EncryptionConfig::new(ring.provider()));
    let store = saltblob::open("memory://", config).await.expect("open");
    let s2 = TestServer::start_on(store, |c| c).await;
    let named = saltblob_server::create_key(&s2.store, "named", false, Some("tenant-b"))
        .await
        .expect("create");
    let m = s2
        .store
        .head(format!("s3/k/{}", named.id))
        .await
        .expect("stored");
    assert_eq!(
        m.sealed_by().map(|sealing| sealing.kek.name.clone()),
        Some("tenant-b".to_owned())
    );
    let err = saltblob_server::create_key(&s2.store, "k", false, None)
        .await
        .expect_err("nothing to seal under");
    assert!(err.to_string().contains("kept sealed"), "{err}");
    // A record written unsealed (not by `saltblob key`) is refused, not trusted.
    let forged_id = "SBKAAAAAAAAAAAAAAAAA";
    let mut record = b"SBAK\x01\x00".to_vec();
    record.extend_from_slice(&0u64.to_le_bytes());
    record.push(1);
    record.push(b'f');
    record.push(40);
    record.extend_from_slice(&[b'x'; 40]);
    record.extend_from_slice(&0u16.to_le_bytes());
    s2.store
        .put(
            format!("s3/k/{forged_id}"),
            record,
            &saltblob::PutOptions::new(),
        )
        .await
        .expect("put");
    let forged = Client {
        access_key: forged_id.to_owned(),
        secret: "x".repeat(40),
        ..s2.client.clone()
    };
    let r = forged.get("/").await;
    assert!(r.status >= 400, "{} {}", r.status, r.text());
    let err = saltblob_server::list_keys(&s2.store)
        .await
        .expect_err("unsealed");
    assert!(err.to_string().contains("unsealed"), "{err}");
}
