//! Bucket lifecycle: Put/Get/DeleteBucketLifecycleConfiguration, `x-amz-expiration` on PUT, GET and HEAD, and the
//! expiry of objects by the lifecycle pass, on a store clock the test moves.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use s3s::dto::{Timestamp, TimestampFormat};
use saltblob::{OffsetClock, StoreConfig};

use crate::TestServer;
use crate::client::Client;

const DAY: u64 = 86_400_000_000;

/// Two rules: `tmp/` expires after 1 day (enabled), `logs/` after 30 (disabled).
const RULES: &str = "<LifecycleConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
<Rule><ID>tmp</ID><Filter><Prefix>tmp/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>1</Days></Expiration></Rule>\
<Rule><ID>logs</ID><Filter><Prefix>logs/</Prefix></Filter><Status>Disabled</Status><Expiration><Days>30</Days></Expiration></Rule>\
</LifecycleConfiguration>";

/// A server on a memory store whose clock the test moves, with bucket `lcb`; `gc_every` as given.
async fn clocked(gc_every: Option<Duration>) -> (TestServer, Arc<OffsetClock>) {
    let clock = OffsetClock::new();
    let store = saltblob::open(
        "memory://",
        StoreConfig::default().with_clock(clock.clone()),
    )
    .await
    .expect("open store");
    let s = TestServer::start_on(store, |c| c.with_gc_every(gc_every)).await;
    let r = s.client.call("PUT", "/lcb").send().await;
    assert_eq!(r.status, 200, "create bucket: {}", r.text());
    (s, clock)
}

async fn put_rules(c: &Client, bucket: &str, xml: &'static str) -> crate::client::Reply {
    c.call("PUT", &format!("/{bucket}"))
        .query("lifecycle", "")
        .header("content-type", "application/xml")
        .body(xml)
        .send()
        .await
}

/// The `x-amz-expiration` expected of object `key` of bucket `lcb` under a rule `rule` of `days`.
async fn expected_expiration(s: &TestServer, key: &str, rule: &str, days: u64) -> String {
    let created = s
        .store
        .head(format!("s3/o/lcb/{key}"))
        .await
        .expect("stored")
        .created_micros;
    let midnight = ((created + days * DAY) / DAY + 1) * DAY;
    let mut date = Vec::new();
    Timestamp::from(SystemTime::UNIX_EPOCH + Duration::from_micros(midnight))
        .format(TimestampFormat::HttpDate, &mut date)
        .expect("date");
    format!(
        "expiry-date=\"{}\", rule-id=\"{rule}\"",
        String::from_utf8(date).expect("ascii")
    )
}

#[tokio::test]
async fn rules_are_kept_shown_and_expire_objects_at_midnight_after_their_days() {
    let (s, clock) = clocked(None).await;
    let c = &s.client;
    let none = c.call("GET", "/lcb").query("lifecycle", "").send().await;
    assert_eq!(
        (none.status, none.code().as_str()),
        (404, "NoSuchLifecycleConfiguration")
    );
    let put = put_rules(c, "lcb", RULES).await;
    assert_eq!(put.status, 200, "{}", put.text());
    let got = c.call("GET", "/lcb").query("lifecycle", "").send().await;
    assert_eq!(got.status, 200, "{}", got.text());
    assert_eq!(got.xml("ID"), ["tmp", "logs"]);
    assert_eq!(got.xml("Prefix"), ["tmp/", "logs/"]);
    assert_eq!(got.xml("Status"), ["Enabled", "Disabled"]);
    assert_eq!(got.xml("Days"), ["1", "30"]);
    // A rule given the older top-level Prefix is shown as given, beside one given a Filter.
    let legacy = put_rules(
        c,
        "lcb",
        "<LifecycleConfiguration>\
<Rule><ID>old</ID><Prefix>old/</Prefix><Status>Enabled</Status><Expiration><Days>3</Days></Expiration></Rule>\
<Rule><ID>new</ID><Filter><Prefix>new/</Prefix></Filter><Status>Enabled</Status><Expiration><Days>4</Days></Expiration></Rule>\
</LifecycleConfiguration>",
    )
    .await;
    assert_eq!(legacy.status, 200, "{}", legacy.text());
    let got = c.call("GET", "/lcb").query("lifecycle", "").send().await;
    let text = got.text();
    assert!(
        text.contains("<ID>old</ID><Prefix>old/</Prefix>")
            || text.contains("<Prefix>old/</Prefix><Status>"),
        "{text}"
    );
    assert!(!text.contains("<Filter><Prefix>old/"), "{text}");
    assert!(
        text.contains("<Filter><Prefix>new/</Prefix></Filter>"),
        "{text}"
    );
    let put = put_rules(c, "lcb", RULES).await;
    assert_eq!(put.status, 200, "{}", put.text());

    let put = c.put("/lcb/tmp/a", &b"short-lived"[..]).await;
    assert_eq!(put.status, 200);
    let expected = expected_expiration(&s, "tmp/a", "tmp", 1).await;
    assert_eq!(
        put.header("x-amz-expiration"),
        expected,
        "PutObject says it"
    );
    assert_eq!(
        c.get("/lcb/tmp/a").await.header("x-amz-expiration"),
        expected
    );
    let head = c.call("HEAD", "/lcb/tmp/a").send().await;
    assert_eq!(head.header("x-amz-expiration"), expected);
    for key in ["keep/b", "logs/c"] {
        let r = c.put(&format!("/lcb/{key}"), &b"kept"[..]).await;
        assert_eq!(r.header("x-amz-expiration"), "", "{key}: no enabled rule");
        assert_eq!(
            c.get(&format!("/lcb/{key}"))
                .await
                .header("x-amz-expiration"),
            ""
        );
    }

    let mut expirer = saltblob_server::Expirer::new();
    let first = expirer.pass(&s.store).await.expect("pass");
    assert_eq!(
        (first.scanned, first.objects),
        (1, 0),
        "tmp/a, not yet expired"
    );
    let again = expirer.pass(&s.store).await.expect("pass");
    assert_eq!(
        again.scanned, 0,
        "the same day with the same rules: not scanned again"
    );
    // A day later it is due only at the next midnight; two days later it has expired.
    clock.advance(Duration::from_secs(86_400 * 2 + 1));
    // Written again now: judged by its own creation, so it stays.
    assert_eq!(c.put("/lcb/tmp/new", &b"fresh"[..]).await.status, 200);
    let expired = expirer.pass(&s.store).await.expect("pass");
    assert_eq!(
        (expired.scanned, expired.objects, expired.bytes),
        (2, 1, 11)
    );
    assert_eq!(c.get("/lcb/tmp/a").await.status, 404);
    assert_eq!(c.get("/lcb/tmp/new").await.status, 200);
    // Changed rules are applied the same day: the whole bucket now, after five days (none is that old).
    const ALL: &str = "<LifecycleConfiguration><Rule><ID>all</ID><Filter></Filter><Status>Enabled</Status>\
        <Expiration><Days>5</Days></Expiration></Rule></LifecycleConfiguration>";
    assert_eq!(put_rules(c, "lcb", ALL).await.status, 200);
    let changed = expirer.pass(&s.store).await.expect("pass");
    assert_eq!(
        (changed.scanned, changed.objects),
        (3, 0),
        "tmp/new, keep/b, logs/c"
    );
    assert_eq!(put_rules(c, "lcb", RULES).await.status, 200);
    clock.advance(Duration::from_secs(86_400 * 40));
    let expired = saltblob_server::expire_objects(&s.store)
        .await
        .expect("pass");
    assert_eq!(
        expired.objects, 1,
        "tmp/new; the disabled rule deletes nothing"
    );
    assert_eq!(c.get("/lcb/keep/b").await.status, 200);
    assert_eq!(c.get("/lcb/logs/c").await.status, 200);

    let deleted = c.call("DELETE", "/lcb").query("lifecycle", "").send().await;
    assert_eq!(deleted.status, 204, "{}", deleted.text());
    let none = c.call("GET", "/lcb").query("lifecycle", "").send().await;
    assert_eq!(none.code(), "NoSuchLifecycleConfiguration");
    assert_eq!(
        c.put("/lcb/tmp/z", &b"z"[..])
            .await
            .header("x-amz-expiration"),
        ""
    );
}

#[tokio::test]
async fn what_is_not_applied_is_refused_and_the_rules_in_force_stay() {
    let (s, _clock) = clocked(None).await;
    let c = &s.client;
    assert_eq!(put_rules(c, "lcb", RULES).await.status, 200);
    for (xml, status, code, needle) in [
        (
            "<LifecycleConfiguration><Rule><ID>t</ID><Filter><Prefix>a/</Prefix></Filter><Status>Enabled</Status>\
             <Transition><Days>30</Days><StorageClass>GLACIER</StorageClass></Transition></Rule></LifecycleConfiguration>",
            501,
            "NotImplemented",
            "Transition",
        ),
        (
            "<LifecycleConfiguration><Rule><ID>t</ID><Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter>\
             <Status>Enabled</Status><Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker>\
             </Expiration></Rule></LifecycleConfiguration>",
            400,
            "InvalidRequest",
            "tags",
        ),
        (
            "<LifecycleConfiguration><Rule><ID>t</ID><Filter></Filter><Status>Enabled</Status>\
             <Expiration><Days>0</Days></Expiration></Rule></LifecycleConfiguration>",
            400,
            "InvalidArgument",
            "positive integer",
        ),
        (
            "<LifecycleConfiguration><Rule><ID>t</ID><Filter></Filter><Status>Enabled</Status></Rule>\
             </LifecycleConfiguration>",
            400,
            "InvalidRequest",
            "action",
        ),
    ] {
        let r = put_rules(c, "lcb", xml).await;
        assert_eq!(
            (r.status, r.code().as_str()),
            (status, code),
            "{needle}: {}",
            r.text()
        );
        assert!(r.text().contains(needle), "{needle}: {}", r.text());
    }
    let got = c.call("GET", "/lcb").query("lifecycle", "").send().await;
    assert_eq!(
        got.xml("ID"),
        ["tmp", "logs"],
        "the refused puts changed nothing"
    );

    let missing = put_rules(c, "nobucket", RULES).await;
    assert_eq!(missing.code(), "NoSuchBucket");

    // A deleted bucket's rules do not come back with a new bucket of its name.
    assert_eq!(c.delete("/lcb").await.status, 204);
    assert!(
        s.store.head("s3/l/lcb").await.is_err(),
        "the record went with the bucket"
    );
    assert_eq!(c.call("PUT", "/lcb").send().await.status, 200);
    let none = c.call("GET", "/lcb").query("lifecycle", "").send().await;
    assert_eq!(none.code(), "NoSuchLifecycleConfiguration");
}

#[tokio::test]
async fn the_servers_gc_loop_applies_the_rules() {
    let (s, clock) = clocked(Some(Duration::from_millis(100))).await;
    let c = &s.client;
    assert_eq!(put_rules(c, "lcb", RULES).await.status, 200);
    assert_eq!(c.put("/lcb/tmp/a", &b"short-lived"[..]).await.status, 200);
    clock.advance(Duration::from_secs(86_400 * 3));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while c.get("/lcb/tmp/a").await.status != 404 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gc loop did not expire tmp/a"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let metrics = s.metrics().await;
    assert!(
        metrics.contains("saltblob_lifecycle_expired_objects_total 1"),
        "{metrics}"
    );
}

/// Two gateways on one store (two stores on one backend): a day's lifecycle pass over a bucket runs in one of
/// them, and each expired object is deleted once; the other skips the bucket until the next day, or until the
/// rules change.
#[tokio::test]
async fn one_gateway_passes_over_a_bucket_per_day() {
    let clock = OffsetClock::new();
    let backend = Arc::new(saltblob_core::MemoryStore::new());
    let config = StoreConfig::default().with_clock(clock.clone());
    let first = saltblob::BlobStore::new(backend.clone(), config.clone()).expect("store");
    let second = saltblob::BlobStore::new(backend, config).expect("store");
    let s = TestServer::start_on(first.clone(), |c| c).await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/lcb").send().await.status, 200);
    assert_eq!(put_rules(c, "lcb", RULES).await.status, 200);
    for i in 0..4 {
        assert_eq!(
            c.put(&format!("/lcb/tmp/{i}"), &b"old"[..]).await.status,
            200
        );
    }
    clock.advance(Duration::from_secs(86_400 * 2 + 1));
    let (mut a, mut b) = (
        saltblob_server::Expirer::new(),
        saltblob_server::Expirer::new(),
    );
    let by_a = a.pass(&first).await.expect("pass");
    let by_b = b.pass(&second).await.expect("pass");
    assert_eq!((by_a.scanned, by_a.objects), (4, 4));
    assert_eq!(
        (by_b.scanned, by_b.objects),
        (0, 0),
        "the day's turn is taken"
    );
    assert_eq!(c.put("/lcb/tmp/new", &b"new"[..]).await.status, 200);
    clock.advance(Duration::from_secs(86_400 * 2));
    let by_b = b.pass(&second).await.expect("pass");
    let by_a = a.pass(&first).await.expect("pass");
    assert_eq!(
        (by_b.scanned, by_b.objects),
        (1, 1),
        "the next day: whoever comes first"
    );
    assert_eq!((by_a.scanned, by_a.objects), (0, 0));
    const ALL: &str = "<LifecycleConfiguration><Rule><ID>all</ID><Filter></Filter><Status>Enabled</Status>\
        <Expiration><Days>1</Days></Expiration></Rule></LifecycleConfiguration>";
    assert_eq!(c.put("/lcb/keep", &b"k"[..]).await.status, 200);
    assert_eq!(put_rules(c, "lcb", ALL).await.status, 200);
    clock.advance(Duration::from_secs(3));
    let by_a = a.pass(&first).await.expect("pass");
    assert_eq!(by_a.scanned, 1, "new rules: due again the same day");
}

/// In a bucket with versioning an expiry writes a delete marker, as S3's: the versions stay, readable by id, and
/// the next pass leaves the marker alone.
#[tokio::test]
async fn in_a_versioned_bucket_an_expiry_writes_a_delete_marker() {
    let (s, clock) = clocked(None).await;
    let c = &s.client;
    let r = crate::versioning::set_versioning(c, "lcb", "Enabled").await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(put_rules(c, "lcb", RULES).await.status, 200);
    let v1 = c
        .put("/lcb/tmp/a", &b"one"[..])
        .await
        .header("x-amz-version-id")
        .to_owned();
    let v2 = c
        .put("/lcb/tmp/a", &b"two"[..])
        .await
        .header("x-amz-version-id")
        .to_owned();
    clock.advance(Duration::from_secs(86_400 * 3));
    let expired = saltblob_server::expire_objects(&s.store)
        .await
        .expect("pass");
    assert_eq!(expired.objects, 1);
    let r = c.get("/lcb/tmp/a").await;
    assert_eq!((r.status, r.header("x-amz-delete-marker")), (404, "true"));
    for (v, body) in [(&v1, "one"), (&v2, "two")] {
        let r = c
            .call("GET", "/lcb/tmp/a")
            .query("versionId", v)
            .send()
            .await;
        assert_eq!(r.text(), body);
    }
    let again = saltblob_server::expire_objects(&s.store)
        .await
        .expect("pass");
    assert_eq!(again.objects, 0, "a delete marker does not expire");
    let listed = c.call("GET", "/lcb").query("versions", "").send().await;
    assert_eq!(listed.xml("VersionId").len(), 3, "{}", listed.text());
}

/// Every action but transitions, in a versioned bucket: noncurrent versions removed after their days but the
/// newest kept, a delete marker removed once it is alone, an expiry only of objects that pass the tag and size
/// filter (and `x-amz-expiration` only on them), incomplete uploads aborted after their days.
#[tokio::test]
async fn noncurrent_versions_lone_markers_filters_and_uploads_follow_their_rules() {
    const ALL: &str = "<LifecycleConfiguration>\
<Rule><ID>nc</ID><Filter><Prefix>v/</Prefix></Filter><Status>Enabled</Status>\
<NoncurrentVersionExpiration><NoncurrentDays>2</NoncurrentDays><NewerNoncurrentVersions>1</NewerNoncurrentVersions>\
</NoncurrentVersionExpiration></Rule>\
<Rule><ID>dm</ID><Filter><Prefix>m/</Prefix></Filter><Status>Enabled</Status>\
<Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker></Expiration>\
<NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays></NoncurrentVersionExpiration></Rule>\
<Rule><ID>big</ID><Filter><And><Prefix>s/</Prefix><Tag><Key>k</Key><Value>v</Value></Tag>\
<ObjectSizeGreaterThan>3</ObjectSizeGreaterThan></And></Filter><Status>Enabled</Status>\
<Expiration><Days>1</Days></Expiration></Rule>\
<Rule><ID>mp</ID><Filter><Prefix>up/</Prefix></Filter><Status>Enabled</Status>\
<AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation></AbortIncompleteMultipartUpload></Rule>\
</LifecycleConfiguration>";
    let (s, clock) = clocked(None).await;
    let c = &s.client;
    let r = crate::versioning::set_versioning(c, "lcb", "Enabled").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let r = put_rules(c, "lcb", ALL).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let shown = c.call("GET", "/lcb").query("lifecycle", "").send().await;
    assert_eq!(
        shown.xml("ID"),
        ["nc", "dm", "big", "mp"],
        "{}",
        shown.text()
    );
    assert_eq!(shown.xml("NewerNoncurrentVersions"), ["1"]);
    assert_eq!(shown.xml("ObjectSizeGreaterThan"), ["3"]);

    let mut v = Vec::new();
    for body in ["1", "2", "3", "4"] {
        let r = c.put("/lcb/v/a", body.as_bytes()).await;
        v.push(r.header("x-amz-version-id").to_owned());
    }
    assert_eq!(c.put("/lcb/m/a", &b"gone"[..]).await.status, 200);
    assert_eq!(c.call("DELETE", "/lcb/m/a").send().await.status, 204);
    for (key, body, tagged) in [
        ("s/big", "0123456789", true),
        ("s/small", "01", true),
        ("s/untagged", "0123456789", false),
    ] {
        let mut put = c
            .call("PUT", &format!("/lcb/{key}"))
            .body(body.as_bytes().to_vec());
        if tagged {
            put = put.header("x-amz-tagging", "k=v");
        }
        assert_eq!(put.send().await.status, 200, "{key}");
    }
    assert!(
        c.call("HEAD", "/lcb/s/big")
            .send()
            .await
            .header("x-amz-expiration")
            .contains("rule-id=\"big\"")
    );
    assert_eq!(
        c.call("HEAD", "/lcb/s/small")
            .send()
            .await
            .header("x-amz-expiration"),
        ""
    );
    for key in ["up/x", "other/y"] {
        let r = c
            .call("POST", &format!("/lcb/{key}"))
            .query("uploads", "")
            .send()
            .await;
        assert_eq!(r.status, 200, "{}", r.text());
    }

    clock.advance(Duration::from_secs(86_400 * 4));
    let mut expirer = saltblob_server::lifecycle_expirer(Duration::from_secs(86_400));
    let done = expirer.pass(&s.store).await.expect("pass");
    assert_eq!(
        (done.objects, done.versions, done.uploads),
        (1, 4, 1),
        "s/big; v/a's two oldest, m/a's version and its lone marker; up/x"
    );
    let listed = c
        .call("GET", "/lcb")
        .query("versions", "")
        .query("prefix", "v/")
        .send()
        .await;
    assert_eq!(
        listed.xml("VersionId"),
        [v[3].clone(), v[2].clone()],
        "the newest noncurrent one stays"
    );
    let listed = c
        .call("GET", "/lcb")
        .query("versions", "")
        .query("prefix", "m/")
        .send()
        .await;
    assert!(listed.xml("Key").is_empty(), "{}", listed.text());
    let r = c.get("/lcb/s/big").await;
    assert_eq!((r.status, r.header("x-amz-delete-marker")), (404, "true"));
    assert_eq!(c.get("/lcb/s/small").await.status, 200);
    assert_eq!(c.get("/lcb/s/untagged").await.status, 200);
    let uploads = c.call("GET", "/lcb").query("uploads", "").send().await;
    assert_eq!(uploads.xml("Key"), ["other/y"], "{}", uploads.text());
}
