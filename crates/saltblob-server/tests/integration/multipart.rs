//! Multipart upload: parts in any order, listings, completion without copying, S3's refusals, abort and gc.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use saltblob::{GcOptions, ManifestBody, OffsetClock, StoreConfig};

use crate::TestServer;
use crate::client::{Client, hex};

/// A server on a new embedded store whose clock the test moves, with a bucket `bkt`; keep the directory.
pub(crate) async fn clocked() -> (TestServer, Arc<OffsetClock>, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let clock = OffsetClock::new();
    let store = saltblob::open(
        &format!("rocksdb://{}", dir.path().display()),
        StoreConfig::default().with_clock(clock.clone()),
    )
    .await
    .expect("open store");
    let s = TestServer::start_on(store, |c| c).await;
    let r = s.client.call("PUT", "/bkt").send().await;
    assert_eq!(r.status, 200, "create bucket: {}", r.text());
    (s, clock, dir)
}

/// Waits (at most 30 s) until upload `id` of bucket `bkt` is in `state` (its record's `s3:upload-state`).
pub(crate) async fn wait_state(s: &TestServer, id: &str, state: &str) {
    for _ in 0..300 {
        let now = s
            .store
            .head(format!("s3/u/bkt/u/{id}"))
            .await
            .ok()
            .and_then(|m| m.metadata.get("s3:upload-state").cloned());
        if now.as_deref() == Some(state) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("upload {id} did not reach {state:?} within 30 s");
}

/// Moves `clock` past the intent lease (a discarded part's chunks go one lease after the discard) and runs gc
/// with grace 0.
async fn gc_after_leases(s: &TestServer, clock: &OffsetClock) -> saltblob::GcReport {
    clock.advance(Duration::from_secs(120));
    s.store
        .gc(&GcOptions::new().with_grace(Duration::ZERO))
        .await
        .expect("gc")
}

pub(crate) const MIB: usize = 1 << 20;

pub(crate) fn md5_hex(data: &[u8]) -> String {
    use s3s::crypto::Checksum as _;
    hex(&s3s::crypto::Md5::checksum(data))
}

/// `len` bytes that differ per `seed`.
pub(crate) fn part(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

pub(crate) async fn create(c: &Client, path: &str) -> String {
    let r = c
        .call("POST", path)
        .query("uploads", "")
        .header("content-type", "video/mp4")
        .header("x-amz-meta-owner", "ops")
        .send()
        .await;
    assert_eq!(r.status, 200, "create: {}", r.text());
    r.xml("UploadId").pop().expect("upload id")
}

pub(crate) async fn upload(c: &Client, path: &str, id: &str, number: u32, data: &Bytes) -> String {
    let r = c
        .call("PUT", path)
        .query("partNumber", &number.to_string())
        .query("uploadId", id)
        .body(data.clone())
        .send()
        .await;
    assert_eq!(r.status, 200, "part {number}: {}", r.text());
    let etag = r.header("etag").trim_matches('"').to_owned();
    assert_eq!(etag, md5_hex(data), "a part's ETag is its MD5");
    etag
}

pub(crate) async fn complete(
    c: &Client,
    path: &str,
    id: &str,
    parts: &[(u32, &str)],
) -> crate::client::Reply {
    let body: String = parts
        .iter()
        .map(|(n, e)| format!("<Part><PartNumber>{n}</PartNumber><ETag>\"{e}\"</ETag></Part>"))
        .collect();
    c.call("POST", path)
        .query("uploadId", id)
        .body(format!(
            "<CompleteMultipartUpload>{body}</CompleteMultipartUpload>"
        ))
        .send()
        .await
}

/// Chunks stored under `key` (all versions).
pub(crate) async fn stored_chunks(s: &TestServer, key: &[u8]) -> u64 {
    let mut n = 0;
    let mut all = s.store.backend().scan_chunks();
    while let Some(addr) = all.try_next().await.expect("scan") {
        n += u64::from(addr.key == key);
    }
    n
}

/// Parts uploaded out of order (one uploaded twice) are listed in order, composed into one object without
/// copying a chunk, read back whole and by range across part boundaries, with the multipart ETag, content
/// type and metadata given at creation; the replaced part's chunks are reclaimed, and the upload is gone; a
/// repeated Complete answers 200 with the same ETag and Location (S3 does).
#[tokio::test]
async fn parts_compose_into_one_object_without_copying() {
    let (s, clock, _dir) = clocked().await;
    let c = &s.client;
    let path = "/bkt/movie.mp4";
    let id = create(c, path).await;
    let (p1, p2, p3) = (part(6 * MIB, 1), part(5 * MIB, 2), part(1234, 3));
    let e3 = upload(c, path, &id, 3, &p3).await;
    let _first = upload(c, path, &id, 1, &part(5 * MIB, 9)).await;
    let e1 = upload(c, path, &id, 1, &p1).await;
    let e2 = upload(c, path, &id, 2, &p2).await;

    let listed = c.call("GET", path).query("uploadId", &id).send().await;
    assert_eq!(listed.status, 200, "{}", listed.text());
    assert_eq!(listed.xml("PartNumber"), ["1", "2", "3"]);
    let uploads = c.call("GET", "/bkt").query("uploads", "").send().await;
    assert_eq!(
        uploads.xml("UploadId"),
        vec![id.clone()],
        "{}",
        uploads.text()
    );

    let key = b"s3/o/bkt/movie.mp4";
    let before = stored_chunks(&s, key).await;
    let r = complete(c, path, &id, &[(1, &e1), (2, &e2), (3, &e3)]).await;
    assert_eq!(r.status, 200, "complete: {}", r.text());
    let etag = r.xml("ETag").pop().expect("etag").replace("&quot;", "\"");
    assert!(etag.trim_matches('"').ends_with("-3"), "{etag}");
    assert_eq!(stored_chunks(&s, key).await, before, "no chunk copied");
    let m = s.store.head(key).await.expect("head");
    assert!(matches!(&m.body, ManifestBody::Segmented(segs) if segs.len() == 3));

    let whole = [&p1[..], &p2[..], &p3[..]].concat();
    let got = c.get(path).await;
    assert_eq!(got.status, 200);
    assert!(got.body == whole, "whole object");
    assert_eq!(got.header("etag"), etag);
    assert_eq!(got.header("content-type"), "video/mp4");
    assert_eq!(got.header("x-amz-meta-owner"), "ops");
    let (a, b) = (6 * MIB - 10, 11 * MIB + 10);
    let ranged = c
        .call("GET", path)
        .header("range", &format!("bytes={a}-{b}"))
        .send()
        .await;
    assert_eq!(ranged.status, 206);
    assert!(ranged.body == whole[a..=b], "range across parts");

    // Completed: a repeated complete answers as the first did.
    let again = complete(c, path, &id, &[(1, &e1), (2, &e2), (3, &e3)]).await;
    assert_eq!(again.status, 200, "repeated complete: {}", again.text());
    assert_eq!(
        again
            .xml("ETag")
            .pop()
            .expect("etag")
            .replace("&quot;", "\""),
        etag
    );
    assert_eq!(again.xml("Location"), ["/bkt/movie.mp4"]);

    // The upload is gone; the part uploaded first as part 1 was discarded and is reclaimed.
    let gone = c.call("GET", path).query("uploadId", &id).send().await;
    assert_eq!(gone.code(), "NoSuchUpload");
    let uploads = c.call("GET", "/bkt").query("uploads", "").send().await;
    assert!(uploads.xml("UploadId").is_empty(), "{}", uploads.text());
    wait_state(&s, &id, "completed").await;
    let r = gc_after_leases(&s, &clock).await;
    assert!(r.reclaim.versions >= 1, "{r:?}");
    assert!(
        stored_chunks(&s, key).await < before,
        "the replaced part's chunks are gone"
    );
    assert!(c.get(path).await.body == whole, "still whole after gc");
}

/// CompleteMultipartUpload refuses parts out of order, unknown parts or ETags, parts without a number or an
/// ETag (`MalformedXML`, as S3), and small parts but the last, and commits nothing; an aborted upload leaves no
/// chunk after gc, and no record once the bucket goes.
#[tokio::test]
async fn bad_completions_commit_nothing_and_abort_leaves_nothing() {
    let (s, clock, _dir) = clocked().await;
    let c = &s.client;
    let path = "/bkt/k";
    let id = create(c, path).await;
    let (p1, p2) = (part(5 * MIB, 1), part(MIB, 2));
    let e1 = upload(c, path, &id, 1, &p1).await;
    let e2 = upload(c, path, &id, 2, &p2).await;
    for (parts, code) in [
        (vec![(2, e2.as_str()), (1, e1.as_str())], "InvalidPartOrder"),
        (vec![(1, e1.as_str()), (3, e2.as_str())], "InvalidPart"),
        (vec![(1, e2.as_str()), (2, e2.as_str())], "InvalidPart"),
    ] {
        let r = complete(c, path, &id, &parts).await;
        assert_eq!(r.code(), code, "{parts:?}: {}", r.text());
        assert_eq!(c.get(path).await.code(), "NoSuchKey", "nothing committed");
    }
    for body in [
        "<Part><PartNumber>1</PartNumber></Part>".to_owned(),
        format!("<Part><ETag>\"{e1}\"</ETag></Part>"),
        String::new(),
    ] {
        let r = c
            .call("POST", path)
            .query("uploadId", &id)
            .body(format!(
                "<CompleteMultipartUpload>{body}</CompleteMultipartUpload>"
            ))
            .send()
            .await;
        assert_eq!(r.code(), "MalformedXML", "{body}: {}", r.text());
    }
    // A small part that is not the last.
    let small = create(c, path).await;
    let s1 = upload(c, path, &small, 1, &p2).await;
    let s2 = upload(c, path, &small, 2, &p2).await;
    let r = complete(c, path, &small, &[(1, &s1), (2, &s2)]).await;
    assert_eq!(r.code(), "EntityTooSmall", "{}", r.text());
    assert_eq!(c.get(path).await.code(), "NoSuchKey");

    // Abort both: nothing is left after gc, and the bucket is empty.
    for upload in [&id, &small] {
        let r = c
            .call("DELETE", path)
            .query("uploadId", upload)
            .send()
            .await;
        assert_eq!(r.status, 204, "abort: {}", r.text());
        let again = c
            .call("DELETE", path)
            .query("uploadId", upload)
            .send()
            .await;
        assert_eq!(again.code(), "NoSuchUpload");
    }
    for upload in [&id, &small] {
        wait_state(&s, upload, "aborted").await;
    }
    gc_after_leases(&s, &clock).await;
    assert_eq!(
        stored_chunks(&s, b"s3/o/bkt/k").await,
        0,
        "every part reclaimed"
    );
    let r = c.delete("/bkt").await;
    assert_eq!(r.status, 204, "delete bucket: {}", r.text());
    let left = s.store.list("s3/u/").await.expect("list");
    assert!(left.is_empty(), "no upload record left: {}", left.len());
    let r = c
        .call("PUT", "/nobkt/k")
        .query("partNumber", "1")
        .query("uploadId", &id)
        .body("x")
        .send()
        .await;
    assert_eq!(r.code(), "NoSuchBucket");
}
