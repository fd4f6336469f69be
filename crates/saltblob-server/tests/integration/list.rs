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
