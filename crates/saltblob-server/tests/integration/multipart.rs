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
    let first = upload(c, path, &id, 1, &part(5 * MIB, 9)).await;
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
    // Part 1 listed twice, with the ETag of its first upload and of the one stored: the stored one is taken.
    let r = complete(c, path, &id, &[(1, &first), (1, &e1), (2, &e2), (3, &e3)]).await;
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
        (
            vec![(1, e2.as_str()), (1, e2.as_str()), (2, e2.as_str())],
            "InvalidPart",
        ),
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

/// `algorithm` over `data`, in base64, as S3 writes checksums.
fn sum(algorithm: &str, data: &[u8]) -> String {
    use s3s::crypto::{Checksum as _, Crc32c, Crc64Nvme, Sha256};
    let raw = match algorithm {
        "crc32c" => Crc32c::checksum(data).to_vec(),
        "crc64nvme" => Crc64Nvme::checksum(data).to_vec(),
        "sha256" => Sha256::checksum(data).to_vec(),
        other => panic!("no {other} here"),
    };
    crate::client::base64(&raw)
}

fn raw_of(value: &str) -> Vec<u8> {
    base64_simd::STANDARD.decode_to_vec(value).expect("base64")
}

/// CreateMultipartUpload with a checksum algorithm (and type), as AWS answers it.
async fn create_with(
    c: &Client,
    path: &str,
    algorithm: &str,
    kind: Option<&str>,
) -> crate::client::Reply {
    let mut call = c
        .call("POST", path)
        .query("uploads", "")
        .header("x-amz-checksum-algorithm", algorithm);
    if let Some(kind) = kind {
        call = call.header("x-amz-checksum-type", kind);
    }
    call.send().await
}

async fn upload_with(
    c: &Client,
    path: &str,
    id: &str,
    number: u32,
    data: &Bytes,
    checksum: Option<(&str, String)>,
) -> crate::client::Reply {
    let mut call = c
        .call("PUT", path)
        .query("partNumber", &number.to_string())
        .query("uploadId", id)
        .body(data.clone());
    if let Some((algorithm, value)) = &checksum {
        call = call.header(&format!("x-amz-checksum-{algorithm}"), value);
    }
    call.send().await
}

/// A part as a Complete lists it: number, ETag, and the checksum element to send (tag, value), if any.
type Listed<'a> = (u32, &'a str, Option<(&'a str, &'a str)>);

/// A Complete listing `parts`, with `headers`.
async fn complete_with(
    c: &Client,
    path: &str,
    id: &str,
    parts: &[Listed<'_>],
    headers: &[(&str, &str)],
) -> crate::client::Reply {
    let body: String = parts
        .iter()
        .map(|(n, e, sum)| {
            let sum = sum.map_or(String::new(), |(tag, v)| format!("<{tag}>{v}</{tag}>"));
            format!("<Part><PartNumber>{n}</PartNumber><ETag>\"{e}\"</ETag>{sum}</Part>")
        })
        .collect();
    let mut call = c.call("POST", path).query("uploadId", id).body(format!(
        "<CompleteMultipartUpload>{body}</CompleteMultipartUpload>"
    ));
    for (k, v) in headers {
        call = call.header(k, v);
    }
    call.send().await
}

/// Full-object and composite checksums, as S3 defines them: the algorithm and type chosen at creation (echoed,
/// and refused where S3 refuses them), enforced on every part (a composite upload's part must carry it; a
/// full-object upload's part has it computed), listed by ListParts, checked at Complete against the parts'
/// and the object's value sent, and returned by GetObject and HeadObject with checksum mode: CRC32C full
/// object (the CRC of the whole object, combined from the parts'), CRC64NVME (full object by default) and
/// SHA256 (composite: SHA256 of the parts' binary checksums, `-<count>`).
#[tokio::test]
async fn full_object_and_composite_checksums() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let (p1, p2) = (part(5 * MIB, 1), part(300_000, 2));
    let whole = [&p1[..], &p2[..]].concat();

    // Refused choices.
    for (algorithm, kind) in [
        ("SHA1", Some("FULL_OBJECT")),
        ("CRC64NVME", Some("COMPOSITE")),
        ("MD5", None),
    ] {
        let r = create_with(c, "/bkt/x", algorithm, kind).await;
        assert_eq!(
            r.code(),
            "InvalidRequest",
            "{algorithm} {kind:?}: {}",
            r.text()
        );
    }

    // CRC32C, full object: part 2 comes without its checksum and has it computed.
    let path = "/bkt/crc32c";
    let r = create_with(c, path, "CRC32C", Some("FULL_OBJECT")).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("x-amz-checksum-algorithm"), "CRC32C");
    assert_eq!(r.header("x-amz-checksum-type"), "FULL_OBJECT");
    let id = r.xml("UploadId").pop().expect("id");
    let wrong = upload_with(c, path, &id, 1, &p1, Some(("sha256", sum("sha256", &p1)))).await;
    assert_eq!(wrong.code(), "InvalidRequest", "{}", wrong.text());
    let r1 = upload_with(c, path, &id, 1, &p1, Some(("crc32c", sum("crc32c", &p1)))).await;
    assert_eq!(r1.status, 200, "{}", r1.text());
    let r2 = upload_with(c, path, &id, 2, &p2, None).await;
    assert_eq!(r2.status, 200, "{}", r2.text());
    assert_eq!(
        r2.header("x-amz-checksum-crc32c"),
        sum("crc32c", &p2),
        "computed"
    );
    let listed = c.call("GET", path).query("uploadId", &id).send().await;
    assert_eq!(
        listed.xml("ChecksumAlgorithm"),
        ["CRC32C"],
        "{}",
        listed.text()
    );
    assert_eq!(listed.xml("ChecksumType"), ["FULL_OBJECT"]);
    assert_eq!(
        listed.xml("ChecksumCRC32C"),
        [sum("crc32c", &p1), sum("crc32c", &p2)]
    );
    let (e1, e2) = (md5_hex(&p1), md5_hex(&p2));
    let parts = [(1, e1.as_str(), None), (2, e2.as_str(), None)];
    let full = sum("crc32c", &whole);
    for (headers, code) in [
        (vec![("x-amz-checksum-type", "COMPOSITE")], "InvalidRequest"),
        (vec![("x-amz-checksum-crc32c", "AAAAAA==")], "BadDigest"),
        (
            vec![("x-amz-checksum-sha256", full.as_str())],
            "InvalidRequest",
        ),
    ] {
        let r = complete_with(c, path, &id, &parts, &headers).await;
        assert_eq!(r.code(), code, "{headers:?}: {}", r.text());
    }
    let done = complete_with(
        c,
        path,
        &id,
        &parts,
        &[
            ("x-amz-checksum-crc32c", &full),
            ("x-amz-checksum-type", "FULL_OBJECT"),
        ],
    )
    .await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(done.xml("ChecksumCRC32C"), [full.as_str()]);
    assert_eq!(done.xml("ChecksumType"), ["FULL_OBJECT"]);
    for method in ["GET", "HEAD"] {
        let got = c
            .call(method, path)
            .header("x-amz-checksum-mode", "ENABLED")
            .send()
            .await;
        assert_eq!(got.status, 200);
        assert_eq!(got.header("x-amz-checksum-crc32c"), full, "{method}");
        assert_eq!(got.header("x-amz-checksum-type"), "FULL_OBJECT", "{method}");
    }

    // CRC64NVME: full object by default.
    let path = "/bkt/crc64";
    let r = create_with(c, path, "CRC64NVME", None).await;
    assert_eq!(
        r.header("x-amz-checksum-type"),
        "FULL_OBJECT",
        "{}",
        r.text()
    );
    let id = r.xml("UploadId").pop().expect("id");
    upload_with(c, path, &id, 1, &p1, None).await;
    upload_with(
        c,
        path,
        &id,
        2,
        &p2,
        Some(("crc64nvme", sum("crc64nvme", &p2))),
    )
    .await;
    let done = complete_with(c, path, &id, &parts, &[]).await;
    assert_eq!(
        done.xml("ChecksumCRC64NVME"),
        [sum("crc64nvme", &whole)],
        "{}",
        done.text()
    );

    // SHA256: composite by default; every part must carry it, and the complete must list it.
    let path = "/bkt/sha";
    let r = create_with(c, path, "SHA256", None).await;
    assert_eq!(r.header("x-amz-checksum-type"), "COMPOSITE", "{}", r.text());
    let id = r.xml("UploadId").pop().expect("id");
    let bare = upload_with(c, path, &id, 1, &p1, None).await;
    assert_eq!(bare.code(), "InvalidRequest", "{}", bare.text());
    let (s1, s2) = (sum("sha256", &p1), sum("sha256", &p2));
    upload_with(c, path, &id, 1, &p1, Some(("sha256", s1.clone()))).await;
    upload_with(c, path, &id, 2, &p2, Some(("sha256", s2.clone()))).await;
    let missing = complete_with(
        c,
        path,
        &id,
        &[(1, &e1, Some(("ChecksumSHA256", &s1))), (2, &e2, None)],
        &[],
    )
    .await;
    assert_eq!(missing.code(), "InvalidRequest", "{}", missing.text());
    assert!(
        missing.text().contains("missing for part 2"),
        "{}",
        missing.text()
    );
    // A wrong object checksum is BadDigest before a part's missing one, as S3 answers.
    let wrong_and_missing = complete_with(
        c,
        path,
        &id,
        &[(1, &e1, Some(("ChecksumSHA256", &s1))), (2, &e2, None)],
        &[("x-amz-checksum-sha256", "bad")],
    )
    .await;
    assert_eq!(
        wrong_and_missing.code(),
        "BadDigest",
        "{}",
        wrong_and_missing.text()
    );
    let mismatch = complete_with(
        c,
        path,
        &id,
        &[
            (1, &e1, Some(("ChecksumSHA256", &s2))),
            (2, &e2, Some(("ChecksumSHA256", &s2))),
        ],
        &[],
    )
    .await;
    assert_eq!(mismatch.code(), "InvalidPart", "{}", mismatch.text());
    let composite = format!("{}-2", sum("sha256", &[raw_of(&s1), raw_of(&s2)].concat()));
    let done = complete_with(
        c,
        path,
        &id,
        &[
            (1, &e1, Some(("ChecksumSHA256", &s1))),
            (2, &e2, Some(("ChecksumSHA256", &s2))),
        ],
        &[("x-amz-checksum-sha256", composite.trim_end_matches("-2"))],
    )
    .await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert_eq!(done.xml("ChecksumSHA256"), [composite.as_str()]);
    let got = c
        .call("HEAD", path)
        .header("x-amz-checksum-mode", "ENABLED")
        .send()
        .await;
    assert_eq!(got.header("x-amz-checksum-sha256"), composite);
    assert_eq!(got.header("x-amz-checksum-type"), "COMPOSITE");
    assert!(c.get(path).await.body == whole);
}

/// DeleteBucket aborts the pending multipart uploads of a bucket that holds no object (S3 does), leaving no
/// upload record and, after gc, no part; it stays `BucketNotEmpty` while the bucket holds an object.
#[tokio::test]
async fn delete_bucket_aborts_pending_uploads() {
    let (s, clock, _dir) = clocked().await;
    let c = &s.client;
    let id = create(c, "/bkt/pending").await;
    upload(c, "/bkt/pending", &id, 1, &part(MIB, 1)).await;
    assert_eq!(c.put("/bkt/object", "x").await.status, 200);
    assert_eq!(c.delete("/bkt").await.code(), "BucketNotEmpty");
    assert_eq!(c.delete("/bkt/object").await.status, 204);
    let r = c.delete("/bkt").await;
    assert_eq!(r.status, 204, "{}", r.text());
    assert!(
        s.store.list("s3/u/").await.expect("list").is_empty(),
        "no upload record left"
    );
    gc_after_leases(&s, &clock).await;
    assert_eq!(
        stored_chunks(&s, b"s3/o/bkt/pending").await,
        0,
        "the part is reclaimed"
    );
    assert_eq!(
        c.call("PUT", "/bkt").send().await.status,
        200,
        "the name is free again"
    );
    let gone = c
        .call("GET", "/bkt/pending")
        .query("uploadId", &id)
        .send()
        .await;
    assert_eq!(gone.code(), "NoSuchUpload");
}

/// The `<Prefix>` of every CommonPrefix of a listing.
fn common_prefixes(r: &crate::client::Reply) -> Vec<String> {
    r.text()
        .split("<CommonPrefixes>")
        .skip(1)
        .filter_map(|p| {
            Some(
                p.split("<Prefix>")
                    .nth(1)?
                    .split("</Prefix>")
                    .next()?
                    .to_owned(),
            )
        })
        .collect()
}

/// ListMultipartUploads lists by key, then by initiation; pages with key-marker / upload-id-marker as S3
/// defines them (NextKeyMarker, NextUploadIdMarker); rolls keys up to the delimiter into CommonPrefixes
/// (which count toward max-uploads, and a key marker naming one skips it); applies the prefix; URL-encodes
/// with encoding-type=url.
#[tokio::test]
async fn uploads_list_by_key_then_initiation() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let a1 = create(c, "/bkt/a").await;
    let c1 = create(c, "/bkt/c").await;
    let b1 = create(c, "/bkt/b/1").await;
    let a2 = create(c, "/bkt/a").await;
    let b2 = create(c, "/bkt/b/2").await;
    let sp = create(c, "/bkt/d%20e").await;
    let list = |query: Vec<(&'static str, String)>| async move {
        let mut call = c.call("GET", "/bkt").query("uploads", "");
        for (k, v) in &query {
            call = call.query(k, v);
        }
        let r = call.send().await;
        assert_eq!(r.status, 200, "{query:?}: {}", r.text());
        r
    };
    let all = list(vec![]).await;
    assert_eq!(
        all.xml("UploadId"),
        [
            a1.as_str(),
            a2.as_str(),
            b1.as_str(),
            b2.as_str(),
            c1.as_str(),
            sp.as_str()
        ]
    );
    assert_eq!(all.xml("Key"), ["a", "a", "b/1", "b/2", "c", "d e"]);
    assert_eq!(all.xml("IsTruncated"), ["false"]);

    let page = list(vec![("max-uploads", "3".into())]).await;
    assert_eq!(
        page.xml("UploadId"),
        [a1.as_str(), a2.as_str(), b1.as_str()]
    );
    assert_eq!(page.xml("IsTruncated"), ["true"]);
    assert_eq!(page.xml("NextKeyMarker"), ["b/1"]);
    assert_eq!(page.xml("NextUploadIdMarker"), [b1.as_str()]);
    let next = list(vec![
        ("key-marker", "a".into()),
        ("upload-id-marker", a1.clone()),
    ])
    .await;
    assert_eq!(
        next.xml("UploadId"),
        [
            a2.as_str(),
            b1.as_str(),
            b2.as_str(),
            c1.as_str(),
            sp.as_str()
        ]
    );
    let past_a = list(vec![("key-marker", "a".into())]).await;
    assert_eq!(
        past_a.xml("UploadId"),
        [b1.as_str(), b2.as_str(), c1.as_str(), sp.as_str()],
        "every upload of the marker key is past"
    );
    let ignored = list(vec![("upload-id-marker", a1.clone())]).await;
    assert_eq!(
        ignored.xml("UploadId").len(),
        6,
        "an upload-id-marker alone is ignored"
    );

    let rolled = list(vec![("delimiter", "/".into())]).await;
    assert_eq!(
        rolled.xml("UploadId"),
        [a1.as_str(), a2.as_str(), c1.as_str(), sp.as_str()]
    );
    assert_eq!(common_prefixes(&rolled), ["b/"]);
    let counted = list(vec![("delimiter", "/".into()), ("max-uploads", "3".into())]).await;
    assert_eq!(counted.xml("UploadId"), [a1.as_str(), a2.as_str()]);
    assert_eq!(common_prefixes(&counted), ["b/"]);
    assert_eq!(counted.xml("NextKeyMarker"), ["b/"]);
    let after_prefix = list(vec![("delimiter", "/".into()), ("key-marker", "b/".into())]).await;
    assert_eq!(
        after_prefix.xml("UploadId"),
        [c1.as_str(), sp.as_str()],
        "{}",
        after_prefix.text()
    );
    let under = list(vec![("prefix", "b/".into())]).await;
    assert_eq!(under.xml("UploadId"), [b1.as_str(), b2.as_str()]);
    let encoded = list(vec![
        ("prefix", "d".into()),
        ("encoding-type", "url".into()),
    ])
    .await;
    assert_eq!(encoded.xml("Key"), ["d%20e"]);
    let none = list(vec![("max-uploads", "0".into())]).await;
    assert!(none.xml("UploadId").is_empty());
}

/// UploadPartCopy copies a range (or all) of one version of an object into a part, checking the source's
/// conditions (412) and the range (InvalidArgument); the part's ETag is the MD5 of the bytes copied, and the
/// completed object is the source's bytes.
#[tokio::test]
async fn upload_part_copy_copies_ranges_of_the_source() {
    let s = TestServer::with_bucket("bkt").await;
    let c = &s.client;
    let src = part(6 * MIB, 5);
    let put = c.put("/bkt/src", src.clone()).await;
    assert_eq!(put.status, 200);
    let src_etag = put.header("etag").to_owned();
    let id = create(c, "/bkt/dst").await;
    let copy = |number: u32, range: Option<&'static str>, if_match: Option<String>| {
        let id = id.clone();
        async move {
            let mut call = c
                .call("PUT", "/bkt/dst")
                .query("partNumber", &number.to_string())
                .query("uploadId", &id)
                .header("x-amz-copy-source", "/bkt/src");
            if let Some(range) = range {
                call = call.header("x-amz-copy-source-range", range);
            }
            if let Some(etag) = if_match {
                call = call.header("x-amz-copy-source-if-match", &etag);
            }
            call.send().await
        }
    };
    let first = copy(1, Some("bytes=0-5242879"), None).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let e1 = first
        .xml("ETag")
        .pop()
        .expect("etag")
        .replace("&quot;", "")
        .replace('"', "");
    assert_eq!(e1, md5_hex(&src[..5 * MIB]));
    let past = copy(2, Some("bytes=0-99999999"), None).await;
    assert_eq!((past.status, past.code().as_str()), (416, "InvalidRange"));
    assert_eq!(
        copy(2, Some("bytes=5-"), None).await.code(),
        "InvalidArgument"
    );
    assert_eq!(
        copy(2, Some("bytes=5242880-6291455"), Some("\"0123\"".into()))
            .await
            .code(),
        "PreconditionFailed"
    );
    let second = copy(2, Some("bytes=5242880-6291455"), Some(src_etag)).await;
    assert_eq!(second.status, 200, "{}", second.text());
    let e2 = second
        .xml("ETag")
        .pop()
        .expect("etag")
        .replace("&quot;", "")
        .replace('"', "");
    let done = complete(c, "/bkt/dst", &id, &[(1, &e1), (2, &e2)]).await;
    assert_eq!(done.status, 200, "{}", done.text());
    assert!(
        c.get("/bkt/dst").await.body == src,
        "the copy is the source"
    );

    // The whole source as one part.
    let whole_id = create(c, "/bkt/dst2").await;
    let r = c
        .call("PUT", "/bkt/dst2")
        .query("partNumber", "1")
        .query("uploadId", &whole_id)
        .header("x-amz-copy-source", "/bkt/src")
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let missing = c
        .call("PUT", "/bkt/dst2")
        .query("partNumber", "2")
        .query("uploadId", &whole_id)
        .header("x-amz-copy-source", "/bkt/nothing")
        .send()
        .await;
    assert_eq!(missing.code(), "NoSuchKey");
}

/// A part announced larger than 5 GiB is refused before its body is read (`EntityTooLarge`); a bucket holds
/// at most `--max-uploads-per-bucket` uploads in progress (`InvalidRequest` beyond), and aborting one makes room.
#[tokio::test]
async fn oversized_parts_and_too_many_uploads_are_refused() {
    let s = TestServer::start_with(crate::StoreKind::Memory, |c| {
        c.with_max_uploads_per_bucket(Some(2))
    })
    .await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/bkt").send().await.status, 200);
    let id = create(c, "/bkt/k").await;
    let (_tx, rx) = tokio::sync::mpsc::channel(1);
    let huge = tokio::time::timeout(
        Duration::from_secs(30),
        c.call("PUT", "/bkt/k")
            .query("partNumber", "1")
            .query("uploadId", &id)
            .stream(rx, (5 << 30) + 1)
            .send(),
    )
    .await
    .expect("answered before the body");
    assert_eq!(huge.code(), "EntityTooLarge", "{}", huge.text());

    let second = create(c, "/bkt/k2").await;
    let third = c.call("POST", "/bkt/k3").query("uploads", "").send().await;
    assert_eq!(third.code(), "InvalidRequest", "{}", third.text());
    assert_eq!(
        c.call("DELETE", "/bkt/k2")
            .query("uploadId", &second)
            .send()
            .await
            .status,
        204
    );
    create(c, "/bkt/k3").await;
}

/// The sweep (the server's periodic gc pass) aborts an upload only after seven days without activity (a part
/// uploaded is activity), removes a completed upload's record after a day (a repeated Complete then finds no
/// upload), and is not stopped by a record that does not decode.
#[tokio::test]
async fn the_sweep_expires_by_last_activity_and_skips_bad_records() {
    let clock = OffsetClock::new();
    let store = saltblob::BlobStore::new(
        Arc::new(saltblob::MemoryStore::new()),
        StoreConfig::default().with_clock(clock.clone()),
    )
    .expect("store");
    let s =
        TestServer::start_on(store, |c| c.with_gc_every(Some(Duration::from_millis(100)))).await;
    let c = &s.client;
    assert_eq!(c.call("PUT", "/bkt").send().await.status, 200);
    // A record that does not decode, listed before the others.
    let bad = format!("s3/u/bkt/u/{}", "0".repeat(32));
    let mut opts = saltblob::PutOptions::new();
    opts.metadata
        .insert("s3:upload-state".into(), "bogus".into());
    s.store.put(&bad, "k", &opts).await.expect("bad record");

    let active = create(c, "/bkt/active").await;
    let idle = create(c, "/bkt/idle").await;
    let done = create(c, "/bkt/done").await;
    let p = part(MIB, 3);
    let e = upload(c, "/bkt/done", &done, 1, &p).await;
    assert_eq!(
        complete(c, "/bkt/done", &done, &[(1, &e)]).await.status,
        200
    );
    let day = Duration::from_secs(24 * 3600);
    clock.advance(day * 6);
    upload(c, "/bkt/active", &active, 1, &p).await;
    clock.advance(day * 2);
    let alive = |id: String, path: &'static str| async move {
        c.call("GET", path)
            .query("uploadId", &id)
            .send()
            .await
            .status
            == 200
    };
    for _ in 0..300 {
        if !alive(idle.clone(), "/bkt/idle").await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !alive(idle.clone(), "/bkt/idle").await,
        "idle for 8 days: aborted"
    );
    assert!(
        alive(active.clone(), "/bkt/active").await,
        "active 2 days ago: kept"
    );
    let again = complete(c, "/bkt/done", &done, &[(1, &e)]).await;
    assert_eq!(
        again.code(),
        "NoSuchUpload",
        "completed 8 days ago: removed"
    );
    assert!(
        s.store.head(&bad).await.is_ok(),
        "the bad record is left alone"
    );
    clock.advance(day * 6);
    for _ in 0..300 {
        if !alive(active.clone(), "/bkt/active").await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        !alive(active, "/bkt/active").await,
        "idle for 6 + 2 days: aborted"
    );
}
