//! The bucket and object settings saltblob does not keep, read as AWS answers for a bucket where they were never
//! set (src/settings.rs): s3cmd's `info`, `cp`, `mv` and `setacl` read them first, and answered `501` before; and
//! ACLs put back as they read (s3cmd's `cp` and `mv` do), accepted only when they grant the owner alone.

use crate::TestServer;

const OWNER_FULL_CONTROL: (&str, &str, &str) =
    ("CanonicalUser", "<ID>saltblob</ID>", "FULL_CONTROL");
const OWNER_READ: (&str, &str, &str) = ("CanonicalUser", "<ID>saltblob</ID>", "READ");
const OTHER_FULL_CONTROL: (&str, &str, &str) =
    ("CanonicalUser", "<ID>someone</ID>", "FULL_CONTROL");
const PUBLIC_READ: (&str, &str, &str) = (
    "Group",
    "<URI>http://acs.amazonaws.com/groups/global/AllUsers</URI>",
    "READ",
);

/// An `AccessControlPolicy` owned by saltblob with `grants` (grantee type, grantee element, permission).
fn acl_xml(grants: &[(&str, &str, &str)]) -> String {
    let grants: String = grants
        .iter()
        .map(|(kind, who, permission)| {
            format!(
                "<Grant><Grantee xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" xsi:type=\"{kind}\">\
                 {who}</Grantee><Permission>{permission}</Permission></Grant>"
            )
        })
        .collect();
    format!(
        "<AccessControlPolicy xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Owner><ID>saltblob</ID></Owner>\
         <AccessControlList>{grants}</AccessControlList></AccessControlPolicy>"
    )
}

/// ACLs never set read back as the owner's `FULL_CONTROL`, ownership as `BucketOwnerPreferred`, request payment as
/// `BucketOwner`, object tags as an empty set; a missing object or bucket is `NoSuchKey` / `NoSuchBucket`.
#[tokio::test]
async fn acls_ownership_payment_and_tags_read_as_on_a_bucket_without_settings() {
    let s = TestServer::with_bucket("settingsbkt").await;
    let c = &s.client;
    assert_eq!(c.put("/settingsbkt/k", &b"x"[..]).await.status, 200);
    for path in ["/settingsbkt", "/settingsbkt/k"] {
        let acl = c.call("GET", path).query("acl", "").send().await;
        assert_eq!(acl.status, 200, "{path}: {}", acl.text());
        assert_eq!(acl.xml("Permission"), ["FULL_CONTROL"], "{}", acl.text());
        assert_eq!(acl.xml("ID"), ["saltblob", "saltblob"], "{}", acl.text());
        assert!(acl.text().contains("CanonicalUser"), "{}", acl.text());
    }
    let ownership = c
        .call("GET", "/settingsbkt")
        .query("ownershipControls", "")
        .send()
        .await;
    assert_eq!(ownership.status, 200, "{}", ownership.text());
    assert_eq!(ownership.xml("ObjectOwnership"), ["BucketOwnerPreferred"]);
    let payment = c
        .call("GET", "/settingsbkt")
        .query("requestPayment", "")
        .send()
        .await;
    assert_eq!(payment.status, 200, "{}", payment.text());
    assert_eq!(payment.xml("Payer"), ["BucketOwner"]);
    let tags = c
        .call("GET", "/settingsbkt/k")
        .query("tagging", "")
        .send()
        .await;
    assert_eq!(tags.status, 200, "{}", tags.text());
    assert!(tags.text().contains("<TagSet"), "{}", tags.text());
    assert!(tags.xml("Tag").is_empty(), "{}", tags.text());

    for query in ["acl", "tagging"] {
        let missing = c
            .call("GET", "/settingsbkt/gone")
            .query(query, "")
            .send()
            .await;
        assert_eq!(
            (missing.status, missing.code().as_str()),
            (404, "NoSuchKey"),
            "{query}"
        );
        let no_bucket = c.call("GET", "/nobucket/k").query(query, "").send().await;
        assert_eq!(
            (no_bucket.status, no_bucket.code().as_str()),
            (404, "NoSuchBucket"),
            "{query}"
        );
    }
    // Putting an ACL back: accepted, changing nothing, when it is the owner's FULL_CONTROL (s3cmd's `cp` puts back
    // the ACL it read), as a canned `private` or as XML; refused when it is no canned ACL.
    for path in ["/settingsbkt", "/settingsbkt/k"] {
        let canned = c
            .call("PUT", path)
            .query("acl", "")
            .header("x-amz-acl", "private")
            .send()
            .await;
        assert_eq!(canned.status, 200, "{path}: {}", canned.text());
        let same = c
            .call("PUT", path)
            .query("acl", "")
            .body(acl_xml(&[OWNER_FULL_CONTROL]))
            .send()
            .await;
        assert_eq!(same.status, 200, "{path}: {}", same.text());
        // Beyond the canned ACLs (the owner's FULL_CONTROL with everyone's READ is `public-read`: acl.rs).
        for grants in [
            &[PUBLIC_READ][..],
            &[OTHER_FULL_CONTROL],
            &[OWNER_READ],
            &[],
        ] {
            let more = c
                .call("PUT", path)
                .query("acl", "")
                .body(acl_xml(grants))
                .send()
                .await;
            assert_eq!(
                (more.status, more.code().as_str()),
                (400, "AccessControlListNotSupported"),
                "{path} {grants:?}: {}",
                more.text()
            );
        }
        let exec = c
            .call("PUT", path)
            .query("acl", "")
            .header("x-amz-acl", "aws-exec-read")
            .send()
            .await;
        assert_eq!(
            (exec.status, exec.code().as_str()),
            (400, "AccessControlListNotSupported")
        );
        let acl = c.call("GET", path).query("acl", "").send().await;
        assert_eq!(acl.xml("Permission"), ["FULL_CONTROL"], "nothing changed");
    }
    let missing = c
        .call("PUT", "/settingsbkt/gone")
        .query("acl", "")
        .header("x-amz-acl", "private")
        .send()
        .await;
    assert_eq!(
        (missing.status, missing.code().as_str()),
        (404, "NoSuchKey")
    );
}

/// Policy, CORS, lifecycle, bucket tags, public access block, default encryption and object lock: AWS's 404 for a
/// bucket without one, with its code; `NoSuchBucket` first for a missing bucket.
#[tokio::test]
async fn configurations_never_set_are_not_found_with_aws_codes() {
    let s = TestServer::with_bucket("settingsbkt").await;
    let c = &s.client;
    let cases = [
        ("policy", "NoSuchBucketPolicy"),
        ("cors", "NoSuchCORSConfiguration"),
        ("lifecycle", "NoSuchLifecycleConfiguration"),
        ("tagging", "NoSuchTagSet"),
        ("publicAccessBlock", "NoSuchPublicAccessBlockConfiguration"),
        (
            "encryption",
            "ServerSideEncryptionConfigurationNotFoundError",
        ),
        ("object-lock", "ObjectLockConfigurationNotFoundError"),
    ];
    for (query, code) in cases {
        let r = c.call("GET", "/settingsbkt").query(query, "").send().await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (404, code),
            "{query}: {}",
            r.text()
        );
        assert_eq!(r.xml("RequestId").len(), 1, "{}", r.text());
        let missing = c.call("GET", "/nobucket").query(query, "").send().await;
        assert_eq!(
            (missing.status, missing.code().as_str()),
            (404, "NoSuchBucket"),
            "{query}"
        );
    }
}
