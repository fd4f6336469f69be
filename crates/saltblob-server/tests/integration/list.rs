//! ListObjectsV2 (prefix, delimiter, continuation, start-after, max-keys) and ListObjects (v1).

use crate::TestServer;

async fn list(s: &TestServer, params: &[(&str, &str)]) -> crate::client::Reply {
    let mut call = s.client.call("GET", "/bkt").query("list-type", "2");
    for (k, v) in params {
        call = call.query(k, v);
    }
    let r = call.send().await;
    assert_eq!(r.status, 200, "{params:?}: {}", r.text());
    r
}

#[tokio::test]
async fn list_v2_with_delimiter_prefix_and_continuation() {
    let s = TestServer::with_bucket("bkt").await;
    let keys = ["a/1", "a/2", "a/3/x", "b/1", "c", "d", "e f"];
    for key in keys {
        let path = format!(
            "/bkt/{}",
            crate::client::uri_encode(key).replace("%2F", "/")
        );
        assert_eq!(
            s.client.put(&path, key.as_bytes().to_vec()).await.status,
            200
        );
    }
    let all = list(&s, &[]).await;
    assert_eq!(all.xml("Key"), keys);
    assert_eq!(all.xml("KeyCount"), ["7"]);
    assert_eq!(all.xml("IsTruncated"), ["false"]);
    assert_eq!(all.xml("Size")[0], "3");

    // Walk with a delimiter, two entries a page: a/ b/ | c d | e f
    let mut pages = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut params = vec![("delimiter", "/"), ("max-keys", "2")];
        if let Some(t) = &token {
            params.push(("continuation-token", t));
        }
        let r = list(&s, &params).await;
        let mut page = r.xml("Prefix");
        page.retain(|p| !p.is_empty()); // the echoed (empty) request prefix
        page.extend(r.xml("Key"));
        pages.push(page);
        if r.xml("IsTruncated") == ["true"] {
            token = r.xml("NextContinuationToken").into_iter().next();
            assert!(token.is_some());
        } else {
            break;
        }
    }
    assert_eq!(pages, [vec!["a/", "b/"], vec!["c", "d"], vec!["e f"]]);

    let r = list(&s, &[("prefix", "a/"), ("delimiter", "/")]).await;
    assert_eq!(r.xml("Key"), ["a/1", "a/2"]);
    assert!(r.xml("Prefix").contains(&"a/3/".to_owned()));
    let r = list(&s, &[("start-after", "b/1")]).await;
    assert_eq!(r.xml("Key"), ["c", "d", "e f"]);
    let r = list(&s, &[("prefix", "e"), ("encoding-type", "url")]).await;
    assert_eq!(r.xml("Key"), ["e%20f"]);
    let bad = s
        .client
        .call("GET", "/bkt")
        .query("list-type", "2")
        .query("continuation-token", "zz")
        .send()
        .await;
    assert_eq!((bad.status, bad.code().as_str()), (400, "InvalidArgument"));

    // ListObjects v1: marker and NextMarker.
    let v1 = s
        .client
        .call("GET", "/bkt")
        .query("max-keys", "3")
        .send()
        .await;
    assert_eq!(v1.xml("Key"), ["a/1", "a/2", "a/3/x"]);
    assert_eq!(v1.xml("IsTruncated"), ["true"]);
    let v1 = s
        .client
        .call("GET", "/bkt")
        .query("marker", "a/3/x")
        .send()
        .await;
    assert_eq!(v1.xml("Key"), ["b/1", "c", "d", "e f"]);
}

#[tokio::test]
async fn delete_objects_reports_each_key_and_quiet_mode_only_errors() {
    let s = TestServer::with_bucket("bkt").await;
    for key in ["x1", "x2", "x3"] {
        assert_eq!(
            s.client.put(&format!("/bkt/{key}"), &b"v"[..]).await.status,
            200
        );
    }
    let body = "<Delete><Object><Key>x1</Key></Object><Object><Key>missing</Key></Object></Delete>";
    let r = s
        .client
        .call("POST", "/bkt")
        .query("delete", "")
        .body(body)
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.xml("Key"), ["x1", "missing"]);
    let body = "<Delete><Quiet>true</Quiet><Object><Key>x2</Key></Object></Delete>";
    let r = s
        .client
        .call("POST", "/bkt")
        .query("delete", "")
        .body(body)
        .send()
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.xml("Key").is_empty());
    let left = list(&s, &[]).await;
    assert_eq!(left.xml("Key"), ["x3"]);
    let r = s
        .client
        .call("POST", "/bkt")
        .query("delete", "")
        .body("<Delete><Object>")
        .send()
        .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "MalformedXML"),
        "{}",
        r.text()
    );
    let many: String = (0..1001)
        .map(|i| format!("<Object><Key>k{i}</Key></Object>"))
        .collect();
    let r = s
        .client
        .call("POST", "/bkt")
        .query("delete", "")
        .body(format!("<Delete>{many}</Delete>"))
        .send()
        .await;
    assert_eq!(
        (r.status, r.code().as_str()),
        (400, "MalformedXML"),
        "{}",
        r.text()
    );
    assert_eq!(
        list(&s, &[]).await.xml("Key"),
        ["x3"],
        "refused requests delete nothing"
    );
}

/// A memory store that counts the manifest records its scans return: the work a listing does.
#[derive(Debug, Default)]
struct CountingScans {
    inner: saltblob_core::MemoryStore,
    records: std::sync::atomic::AtomicUsize,
    scans: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl saltblob_core::ChunkStoreLayer for CountingScans {
    fn inner(&self) -> &dyn saltblob_core::ChunkStore {
        &self.inner
    }

    async fn scan_records(
        &self,
        ns: saltblob_core::Namespace,
        prefix: &[u8],
        start_after: Option<&[u8]>,
        limit: usize,
    ) -> saltblob_core::Result<Vec<(bytes::Bytes, bytes::Bytes)>> {
        let inner: &dyn saltblob_core::ChunkStore = &self.inner;
        let page = inner.scan_records(ns, prefix, start_after, limit).await?;
        if ns == saltblob_core::Namespace::Manifest {
            self.records
                .fetch_add(page.len(), std::sync::atomic::Ordering::Relaxed);
            self.scans
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(page)
    }
}

impl CountingScans {
    /// (records, scans) since the last call.
    fn take(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.records.swap(0, Relaxed), self.scans.swap(0, Relaxed))
    }
}

/// A server with bucket `bkt` on a counting memory store.
async fn counting_server() -> (TestServer, std::sync::Arc<CountingScans>) {
    let counting = std::sync::Arc::new(CountingScans::default());
    let store = saltblob::BlobStore::new(counting.clone(), saltblob::StoreConfig::default())
        .expect("store");
    let s = TestServer::start_with(crate::StoreKind::Store(store), |c| c).await;
    assert_eq!(s.client.call("PUT", "/bkt").send().await.status, 200);
    (s, counting)
}

/// F9: a delimiter listing reads about one record per common prefix, not a page of manifests after each jump;
/// with the old 1000-entry page after each jump, this listing read about 40 × 600 records.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delimiter_listing_reads_about_one_record_per_common_prefix() {
    let (s, counting) = counting_server().await;
    let (dirs, files) = (40, 600);
    for d in 0..dirs {
        for f in 0..files {
            s.store
                .put(
                    format!("s3/o/bkt/d{d:03}/f{f:04}"),
                    &b"x"[..],
                    &Default::default(),
                )
                .await
                .expect("put");
        }
    }
    s.store
        .put("s3/o/bkt/top", &b"x"[..], &Default::default())
        .await
        .expect("put");
    counting.take();
    let r = list(&s, &[("delimiter", "/")]).await;
    let (records, scans) = counting.take();
    let mut prefixes = r.xml("Prefix");
    prefixes.retain(|p| !p.is_empty());
    assert_eq!(prefixes.len(), dirs);
    assert_eq!(r.xml("Key"), ["top"]);
    assert_eq!(r.xml("IsTruncated"), ["false"]);
    println!(
        "delimiter listing of {dirs} prefixes × {files} keys: {records} records read in {scans} scans"
    );
    assert!(
        records <= 2 * (dirs + 1) + 2,
        "{records} records read for {dirs} common prefixes"
    );

    // Paged, ten prefixes a response: the same bound, and every prefix once.
    let mut token: Option<String> = None;
    let mut seen = Vec::new();
    loop {
        let mut params = vec![("delimiter", "/"), ("max-keys", "10")];
        if let Some(t) = &token {
            params.push(("continuation-token", t));
        }
        let r = list(&s, &params).await;
        let mut page = r.xml("Prefix");
        page.retain(|p| !p.is_empty());
        seen.extend(page);
        seen.extend(r.xml("Key"));
        token = r.xml("NextContinuationToken").into_iter().next();
        if r.xml("IsTruncated") != ["true"] {
            break;
        }
    }
    let (records, scans) = counting.take();
    println!("the same, 10 a page: {records} records read in {scans} scans");
    assert_eq!(seen.len(), dirs + 1);
    assert!(records <= 2 * (dirs + 1) + 2 * 5, "{records} records read");
}

/// F9: entries a listing skips (keys that are not UTF-8, damaged manifests) count toward its budget: a listing
/// that reaches it answers truncated with a token (v2) or NextMarker (v1) that resumes after what it read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_stops_at_its_budget_and_resumes_past_what_it_skipped() {
    let (s, counting) = counting_server().await;
    let budget = 10_000; // list.rs MAX_EXAMINED
    for i in 0..6_000 {
        let mut key = b"s3/o/bkt/a\xff".to_vec();
        key.extend(format!("{i:05}").as_bytes());
        s.store
            .put(&key, &b"x"[..], &Default::default())
            .await
            .expect("put");
    }
    for i in 0..6_000 {
        s.store
            .backend()
            .put_record(
                saltblob_core::Namespace::Manifest,
                format!("s3/o/bkt/b{i:05}").as_bytes(),
                bytes::Bytes::from_static(b"\x01damaged"),
                &saltblob_core::Precondition::None,
            )
            .await
            .expect("damage");
    }
    assert_eq!(s.client.put("/bkt/c", &b"kept"[..]).await.status, 200);
    counting.take();

    let first = list(&s, &[]).await;
    let (records, _) = counting.take();
    println!("first response over 12000 skipped entries: {records} records read");
    assert_eq!(first.xml("IsTruncated"), ["true"], "{}", first.text());
    assert!(first.xml("Key").is_empty());
    assert!(records <= budget, "{records} records read");
    let token = first.xml("NextContinuationToken");
    assert_eq!(token.len(), 1);
    let second = list(&s, &[("continuation-token", &token[0])]).await;
    assert_eq!(second.xml("Key"), ["c"]);
    assert_eq!(second.xml("IsTruncated"), ["false"]);
    counting.take();

    // v1: the same budget; its NextMarker resumes past the damaged keys it read.
    let v1 = s.client.call("GET", "/bkt").send().await;
    let (records, _) = counting.take();
    assert_eq!(v1.xml("IsTruncated"), ["true"], "{}", v1.text());
    assert!(records <= budget, "{records} records read");
    let marker = v1.xml("NextMarker");
    assert_eq!(marker.len(), 1);
    assert!(marker[0].starts_with('b'), "{marker:?}");
    let v1 = s
        .client
        .call("GET", "/bkt")
        .query("marker", &marker[0])
        .send()
        .await;
    assert_eq!(v1.xml("Key"), ["c"]);
    assert_eq!(v1.xml("IsTruncated"), ["false"]);
}

/// F12: a v1 marker that ends with the delimiter but is not a common prefix of the listing (a folder marker
/// object listed under its own prefix) resumes right after itself, not past every key under it.
#[tokio::test]
async fn a_v1_folder_marker_does_not_skip_the_keys_under_it() {
    let s = TestServer::with_bucket("bkt").await;
    for key in ["dir/", "dir/a", "dir/b", "dir/sub/x", "other"] {
        assert_eq!(
            s.client.put(&format!("/bkt/{key}"), &b"v"[..]).await.status,
            200
        );
    }
    let mut marker: Option<String> = None;
    let mut pages = Vec::new();
    loop {
        let mut call = s
            .client
            .call("GET", "/bkt")
            .query("prefix", "dir/")
            .query("delimiter", "/")
            .query("max-keys", "1");
        if let Some(m) = &marker {
            call = call.query("marker", m);
        }
        let r = call.send().await;
        assert_eq!(r.status, 200, "{}", r.text());
        let mut page = r.xml("Key");
        let mut prefixes = r.xml("Prefix");
        prefixes.retain(|p| p != "dir/");
        page.extend(prefixes);
        pages.push(page);
        if r.xml("IsTruncated") != ["true"] {
            break;
        }
        marker = r.xml("NextMarker").into_iter().next();
        assert!(marker.is_some(), "{}", r.text());
    }
    assert_eq!(
        pages,
        [vec!["dir/"], vec!["dir/a"], vec!["dir/b"], vec!["dir/sub/"]]
    );
    // A marker that is a common prefix of the listing still skips the keys under it.
    let r = s
        .client
        .call("GET", "/bkt")
        .query("delimiter", "/")
        .query("marker", "dir/")
        .send()
        .await;
    assert_eq!(r.xml("Key"), ["other"]);
}

/// F13: `max-keys=0` lists nothing and is not truncated (ceph s3-tests' `test_bucket_listv2_maxkeys_zero`).
#[tokio::test]
async fn max_keys_zero_is_empty_and_not_truncated() {
    let s = TestServer::with_bucket("bkt").await;
    assert_eq!(s.client.put("/bkt/k", &b"v"[..]).await.status, 200);
    let v2 = list(&s, &[("max-keys", "0")]).await;
    assert_eq!(v2.xml("IsTruncated"), ["false"]);
    assert_eq!(v2.xml("KeyCount"), ["0"]);
    assert!(v2.xml("NextContinuationToken").is_empty());
    for query in ["max-keys", "versions"] {
        let mut call = s.client.call("GET", "/bkt").query("max-keys", "0");
        if query == "versions" {
            call = call.query("versions", "");
        }
        let r = call.send().await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert_eq!(r.xml("IsTruncated"), ["false"], "{query}");
        assert!(r.xml("Key").is_empty());
    }
}

/// What a listing echoes as S3 does: v1 always carries `Marker` (empty when none was sent) and each object's
/// `Owner`; v2 the owner only with `fetch-owner=true`; an empty delimiter is no delimiter and is not echoed.
#[tokio::test]
async fn listings_echo_marker_owner_and_delimiter_as_s3() {
    let s = TestServer::with_bucket("bkt").await;
    assert_eq!(s.client.put("/bkt/a/b", &b"v"[..]).await.status, 200);
    let v1 = |params: &'static [(&'static str, &'static str)]| {
        let mut call = s.client.call("GET", "/bkt");
        for (k, v) in params {
            call = call.query(k, v);
        }
        call.send()
    };
    for params in [&[][..], &[("marker", "")][..]] {
        let r = v1(params).await;
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(
            r.text().contains("<Marker></Marker>") || r.text().contains("<Marker/>"),
            "{params:?}: {}",
            r.text()
        );
        assert_eq!(
            r.xml("ID"),
            ["saltblob"],
            "v1 lists the owner: {}",
            r.text()
        );
    }
    let r = v1(&[("delimiter", "")]).await;
    assert_eq!(r.xml("Key"), ["a/b"], "an empty delimiter groups nothing");
    assert!(!r.text().contains("<Delimiter"), "{}", r.text());
    let r = v1(&[("delimiter", "/")]).await;
    assert_eq!(r.xml("Delimiter"), ["/"]);
    // v1's Prefix is echoed as sent even with encoding-type=url (botocore does not decode it); names are encoded.
    let r = v1(&[("prefix", "a/\n"), ("encoding-type", "url")]).await;
    assert!(r.text().contains("<Prefix>a/\n</Prefix>"), "{}", r.text());

    let r = list(&s, &[]).await;
    assert!(
        !r.text().contains("<Owner>"),
        "v2 without fetch-owner: {}",
        r.text()
    );
    let r = list(&s, &[("fetch-owner", "true")]).await;
    assert_eq!(r.xml("ID"), ["saltblob"], "{}", r.text());
    let r = list(&s, &[("delimiter", "")]).await;
    assert_eq!(r.xml("Key"), ["a/b"]);
    assert!(!r.text().contains("<Delimiter"), "{}", r.text());
}

/// ListObjectVersions on a bucket without versioning: every object once, as version `null`, the latest; prefix,
/// delimiter, key-marker and max-keys as ListObjects; version-id-marker only `null`, with a key marker.
#[tokio::test]
async fn list_object_versions_lists_every_object_as_version_null() {
    let s = TestServer::with_bucket("bkt").await;
    for key in ["a", "b/1", "b/2", "c", "d"] {
        assert_eq!(
            s.client
                .put(&format!("/bkt/{key}"), &b"vv"[..])
                .await
                .status,
            200
        );
    }
    let versions = |params: &[(&str, &str)]| {
        let mut call = s.client.call("GET", "/bkt").query("versions", "");
        for (k, v) in params {
            call = call.query(k, v);
        }
        call.send()
    };
    let all = versions(&[]).await;
    assert_eq!(all.status, 200, "{}", all.text());
    assert_eq!(all.xml("Key"), ["a", "b/1", "b/2", "c", "d"]);
    assert_eq!(all.xml("VersionId"), ["null"; 5]);
    assert_eq!(all.xml("IsLatest"), ["true"; 5]);
    assert_eq!(all.xml("Size"), ["2"; 5]);
    assert_eq!(all.xml("IsTruncated"), ["false"]);
    assert!(all.text().contains("<Version>"), "{}", all.text());

    // Paged by two, with a delimiter: a b/ | c d.
    let first = versions(&[("delimiter", "/"), ("max-keys", "2")]).await;
    assert_eq!(first.xml("Key"), ["a"]);
    assert!(first.xml("Prefix").contains(&"b/".to_owned()));
    assert_eq!(first.xml("IsTruncated"), ["true"]);
    assert_eq!(first.xml("NextKeyMarker"), ["b/"]);
    let second = versions(&[("delimiter", "/"), ("max-keys", "2"), ("key-marker", "b/")]).await;
    assert_eq!(second.xml("Key"), ["c", "d"]);
    assert_eq!(second.xml("IsTruncated"), ["false"]);
    // Without a delimiter the next markers are a key and its version.
    let first = versions(&[("max-keys", "2")]).await;
    assert_eq!(first.xml("NextKeyMarker"), ["b/1"]);
    assert_eq!(first.xml("NextVersionIdMarker"), ["null"]);
    let second = versions(&[
        ("max-keys", "2"),
        ("key-marker", "b/1"),
        ("version-id-marker", "null"),
    ])
    .await;
    assert_eq!(second.xml("Key"), ["b/2", "c"]);
    let prefixed = versions(&[("prefix", "b/")]).await;
    assert_eq!(prefixed.xml("Key"), ["b/1", "b/2"]);

    for (params, code) in [
        (vec![("version-id-marker", "null")], "InvalidArgument"),
        (
            vec![
                ("key-marker", "a"),
                ("version-id-marker", "3HL4kqtJlcpXroDTDmJ"),
            ],
            "InvalidArgument",
        ),
    ] {
        let r = versions(&params).await;
        assert_eq!((r.status, r.code().as_str()), (400, code), "{params:?}");
    }
}
