//! Canned ACLs tried as attackers and as the users they are for: an unsigned request tries every operation on a
//! private bucket; each canned ACL opens exactly what it says, to whom it says, and only while it is set; opening
//! needs `owner`.

use saltblob_core::conformance::encryption::TempKeyring;
use saltblob_server::Right;

use crate::client::{Client, Reply};
use crate::grants::{every_operation, stored_key, victim, victim_state};

const ALL_USERS: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
const AUTHENTICATED_USERS: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";

async fn anonymous(c: &Client, method: &'static str, path: &str) -> Reply {
    c.call(method, path).anonymous().send().await
}

/// Sets `path`'s canned ACL (a bucket's or an object's) with the root key.
async fn set_acl(c: &Client, path: &str, acl: &str) {
    let r = c
        .call("PUT", path)
        .query("acl", "")
        .header("x-amz-acl", acl)
        .send()
        .await;
    assert_eq!(r.status, 200, "{path} {acl}: {}", r.text());
}

#[tokio::test]
async fn anyone_is_refused_every_operation_on_a_private_bucket_and_changes_nothing() {
    let ring = TempKeyring::new();
    let (s, upload) = victim(&ring).await;
    let before = victim_state(&s).await;
    let ops = every_operation("victim", &upload);
    let mut allowed = Vec::new();
    for (_, a) in &ops {
        let r = a.send_as(&s.client, true).await;
        if r.status != 403 {
            allowed.push(format!("{}: {} {}", a.op, r.status, r.text()));
        }
    }
    assert!(
        allowed.is_empty(),
        "allowed unsigned ({} of {}): {allowed:#?}",
        allowed.len(),
        ops.len()
    );
    assert_eq!(victim_state(&s).await, before);
}

/// Who may do what, for each ACL of the bucket (its objects private) and of one object (its bucket private).
#[tokio::test]
async fn each_canned_acl_opens_what_it_says_to_whom_it_says_while_it_is_set() {
    let ring = TempKeyring::new();
    let (s, _) = victim(&ring).await;
    let root = &s.client;
    let signed = stored_key(&s, "stranger", false).await;
    // (bucket ACL, may anyone list, may a signed key list, may anyone write, may a signed key write)
    for (acl, anyone_lists, signed_lists, anyone_writes) in [
        ("private", false, false, false),
        ("public-read", true, true, false),
        ("public-read-write", true, true, true),
        ("authenticated-read", false, true, false),
        ("bucket-owner-full-control", false, false, false),
    ] {
        set_acl(root, "/victim", acl).await;
        let grants = root.call("GET", "/victim").query("acl", "").send().await;
        let uris = grants.xml("URI");
        let expected: &[&str] = match acl {
            "public-read" => &[ALL_USERS],
            "public-read-write" => &[ALL_USERS, ALL_USERS],
            "authenticated-read" => &[AUTHENTICATED_USERS],
            _ => &[],
        };
        assert_eq!(uris, expected, "{acl}: {}", grants.text());
        for (who, lists) in [(true, anyone_lists), (false, signed_lists)] {
            let mut list = signed.call("GET", "/victim").query("list-type", "2");
            if who {
                list = list.anonymous();
            }
            let r = list.send().await;
            assert_eq!(
                r.status == 200,
                lists,
                "{acl} anonymous={who}: {}",
                r.text()
            );
            if lists {
                assert_eq!(r.xml("Key"), ["secret.txt"], "{}", r.text());
            }
            // The bucket's ACL does not open its objects.
            let mut get = signed.call("GET", "/victim/secret.txt");
            if who {
                get = get.anonymous();
            }
            assert_eq!(get.send().await.status, 403, "{acl}");
            // Writes: a bucket open to them lets anyone put and delete objects, and nothing else.
            let mut put = signed.call("PUT", "/victim/dropped").body("d");
            if who {
                put = put.anonymous();
            }
            let r = put.send().await;
            assert_eq!(
                r.status == 200,
                anyone_writes,
                "{acl} anonymous={who}: {}",
                r.text()
            );
            let mut delete = signed.call("DELETE", "/victim/dropped");
            if who {
                delete = delete.anonymous();
            }
            let r = delete.send().await;
            assert_eq!(r.status == 204, anyone_writes, "{acl}: {}", r.text());
            let mut settings = signed
                .call("PUT", "/victim")
                .query("acl", "")
                .header("x-amz-acl", "private");
            if who {
                settings = settings.anonymous();
            }
            assert_eq!(settings.send().await.status, 403, "{acl}");
        }
        assert_eq!(root.get("/victim/dropped").await.status, 404, "{acl}");
    }
    // Now the bucket is closed again; open one object.
    for (acl, anyone_reads, signed_reads) in [
        ("public-read", true, true),
        ("authenticated-read", false, true),
        ("private", false, false),
    ] {
        set_acl(root, "/victim/secret.txt", acl).await;
        let r = anonymous(root, "GET", "/victim/secret.txt").await;
        assert_eq!(r.status == 200, anyone_reads, "{acl}: {}", r.text());
        if anyone_reads {
            assert_eq!(r.text(), "the secret");
        }
        let r = signed.get("/victim/secret.txt").await;
        assert_eq!(r.status == 200, signed_reads, "{acl}: {}", r.text());
        assert_eq!(
            anonymous(root, "HEAD", "/victim/secret.txt").await.status == 200,
            anyone_reads
        );
        // The object's ACL opens it to reads only: not its tags, not a write, not a listing.
        assert_eq!(
            signed
                .call("GET", "/victim/secret.txt")
                .query("tagging", "")
                .anonymous()
                .send()
                .await
                .status,
            403
        );
        assert_eq!(signed.put("/victim/secret.txt", "x").await.status, 403);
        assert_eq!(
            anonymous(root, "GET", "/victim?list-type=2").await.status,
            403
        );
    }
    assert_eq!(root.get("/victim/secret.txt").await.text(), "the secret");
    // A missing object: 404 to those who may list the bucket, 403 to the others.
    assert_eq!(anonymous(root, "GET", "/victim/none").await.status, 403);
    set_acl(root, "/victim", "public-read").await;
    let r = anonymous(root, "GET", "/victim/none").await;
    assert_eq!((r.status, r.code().as_str()), (404, "NoSuchKey"));
    // A missing bucket: 403 to anyone.
    assert_eq!(anonymous(root, "GET", "/nobucket/none").await.status, 403);
}

#[tokio::test]
async fn opening_needs_owner_and_an_acl_lasts_as_long_as_its_version() {
    let ring = TempKeyring::new();
    let (s, _) = victim(&ring).await;
    let root = &s.client;
    let writer = stored_key(&s, "writer", false).await;
    saltblob_server::allow(&s.store, &writer.access_key, "victim", Right::Write)
        .await
        .expect("allow");
    // A write grant writes, but may not open what it writes.
    let r = writer
        .call("PUT", "/victim/w")
        .header("x-amz-acl", "public-read")
        .body("w")
        .send()
        .await;
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(root.get("/victim/w").await.status, 404);
    assert_eq!(writer.put("/victim/w", "w").await.status, 200);
    for (acl, status) in [
        ("public-read", 403),
        ("authenticated-read", 403),
        ("private", 200),
    ] {
        let r = writer
            .call("PUT", "/victim/w")
            .query("acl", "")
            .header("x-amz-acl", acl)
            .send()
            .await;
        assert_eq!(r.status, status, "{acl}: {}", r.text());
    }
    assert_eq!(anonymous(root, "GET", "/victim/w").await.status, 403);
    // An owner may.
    saltblob_server::allow(&s.store, &writer.access_key, "victim", Right::Owner)
        .await
        .expect("allow");
    tokio::time::sleep(saltblob_server::GRANTS_CACHED_FOR).await;
    let r = writer
        .call("PUT", "/victim/w")
        .header("x-amz-acl", "public-read")
        .body("open")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(anonymous(root, "GET", "/victim/w").await.text(), "open");
    // A PUT ?acl keeps the object's ETag and bytes.
    let etag = root
        .call("HEAD", "/victim/w")
        .send()
        .await
        .header("etag")
        .to_owned();
    set_acl(root, "/victim/w", "authenticated-read").await;
    assert_eq!(
        root.call("HEAD", "/victim/w").send().await.header("etag"),
        etag
    );
    set_acl(root, "/victim/w", "public-read").await;
    // A copy is private unless the copy asks; an overwrite without an ACL is private again.
    let r = root
        .call("PUT", "/victim/copy")
        .header("x-amz-copy-source", "victim/w")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(anonymous(root, "GET", "/victim/copy").await.status, 403);
    let r = root
        .call("PUT", "/victim/copy")
        .header("x-amz-copy-source", "victim/w")
        .header("x-amz-acl", "public-read")
        .header("x-amz-metadata-directive", "REPLACE")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(anonymous(root, "GET", "/victim/copy").await.text(), "open");
    assert_eq!(root.put("/victim/w", "closed").await.status, 200);
    assert_eq!(anonymous(root, "GET", "/victim/w").await.status, 403);
    // A multipart upload's ACL is the completed object's.
    let r = root
        .call("POST", "/victim/mp")
        .query("uploads", "")
        .header("x-amz-acl", "public-read")
        .send()
        .await;
    let upload = r.xml("UploadId").into_iter().next().expect("an upload id");
    let r = root
        .call("PUT", "/victim/mp")
        .query("partNumber", "1")
        .query("uploadId", &upload)
        .body("part")
        .send()
        .await;
    let etag = r.header("etag").to_owned();
    let complete = format!(
        "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>{etag}</ETag></Part></CompleteMultipartUpload>"
    );
    let r = root
        .call("POST", "/victim/mp")
        .query("uploadId", &upload)
        .body(complete)
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(anonymous(root, "GET", "/victim/mp").await.text(), "part");
    // Anyone may write into a public-read-write bucket, but not open what it writes.
    set_acl(root, "/victim", "public-read-write").await;
    let r = root
        .call("PUT", "/victim/anon")
        .header("x-amz-acl", "public-read")
        .body("a")
        .anonymous()
        .send()
        .await;
    assert_eq!(r.status, 403, "{}", r.text());
    // A bucket deleted and made again under the name is private.
    for key in ["secret.txt", "w", "copy", "mp"] {
        assert_eq!(root.delete(&format!("/victim/{key}")).await.status, 204);
    }
    let uploads = root
        .call("GET", "/victim")
        .query("uploads", "")
        .send()
        .await;
    for (key, id) in uploads.xml("Key").into_iter().zip(uploads.xml("UploadId")) {
        root.call("DELETE", &format!("/victim/{key}"))
            .query("uploadId", &id)
            .send()
            .await;
    }
    let r = root.delete("/victim").await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(root.call("PUT", "/victim").send().await.status, 200);
    assert_eq!(
        anonymous(root, "GET", "/victim?list-type=2").await.status,
        403
    );
    let r = root.call("GET", "/victim").query("acl", "").send().await;
    assert!(r.xml("URI").is_empty(), "{}", r.text());
}

/// `PUT ?acl` takes the policies GetBucketAcl shows for a canned ACL, and refuses the rest; `x-amz-acl` on
/// CreateBucket sets the new bucket's.
#[tokio::test]
async fn policies_and_create_bucket_set_canned_acls_and_nothing_else() {
    let ring = TempKeyring::new();
    let (s, _) = victim(&ring).await;
    let root = &s.client;
    let r = root
        .call("PUT", "/open")
        .header("x-amz-acl", "public-read")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        anonymous(root, "GET", "/open?list-type=2").await.status,
        200
    );
    let owner = "<Grant><Grantee xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" \
        xsi:type=\"CanonicalUser\"><ID>saltblob</ID></Grantee><Permission>FULL_CONTROL</Permission></Grant>";
    let group = |uri: &str, permission: &str| {
        format!(
            "<Grant><Grantee xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:type=\"Group\">\
             <URI>{uri}</URI></Grantee><Permission>{permission}</Permission></Grant>"
        )
    };
    let policy = |grants: &str| {
        format!(
            "<AccessControlPolicy xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Owner><ID>saltblob</ID>\
             </Owner><AccessControlList>{grants}</AccessControlList></AccessControlPolicy>"
        )
    };
    for (grants, status, listed) in [
        (owner.to_owned(), 200, false),
        (
            format!("{owner}{}", group(AUTHENTICATED_USERS, "READ")),
            200,
            false,
        ),
        (format!("{owner}{}", group(ALL_USERS, "READ")), 200, true),
        // Another permission, a grant to WRITE alone, no FULL_CONTROL for the owner.
        (
            format!("{owner}{}", group(ALL_USERS, "READ_ACP")),
            400,
            true,
        ),
        (format!("{owner}{}", group(ALL_USERS, "WRITE")), 400, true),
        (group(ALL_USERS, "READ"), 400, true),
    ] {
        let r = root
            .call("PUT", "/open")
            .query("acl", "")
            .body(policy(&grants))
            .send()
            .await;
        assert_eq!(r.status, status, "{grants}: {}", r.text());
        if status == 400 {
            assert_eq!(r.code(), "AccessControlListNotSupported");
        }
        let listed_now = anonymous(root, "GET", "/open?list-type=2").await.status == 200;
        assert_eq!(listed_now, listed, "{grants}");
    }
    // ACLs saltblob does not keep are refused before anything is written.
    let r = root
        .call("PUT", "/other")
        .header("x-amz-acl", "log-delivery-write")
        .send()
        .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "AccessControlListNotSupported")
    );
    assert_eq!(root.call("HEAD", "/other").send().await.status, 404);
}

/// Concurrent changes of one bucket's ACL and versioning (changes of its record in place) all succeed: one that
/// finds the record changed by another since its read tries again (they answered `NoSuchBucket` before).
#[tokio::test]
async fn concurrent_changes_of_a_bucket_record_all_succeed() {
    let s = crate::TestServer::with_bucket("busy").await;
    let changes = (0..16).map(|i| {
        let c = s.client.clone();
        async move {
            let r = if i % 2 == 0 {
                c.call("PUT", "/busy")
                    .query("acl", "")
                    .header(
                        "x-amz-acl",
                        if i % 4 == 0 { "public-read" } else { "private" },
                    )
                    .send()
                    .await
            } else {
                crate::versioning::set_versioning(&c, "busy", "Enabled").await
            };
            (r.status, r.text())
        }
    });
    for (status, text) in futures::future::join_all(changes).await {
        assert_eq!(status, 200, "{text}");
    }
    let r = s
        .client
        .call("GET", "/busy")
        .query("versioning", "")
        .send()
        .await;
    assert_eq!(r.xml("Status"), ["Enabled"]);
}
