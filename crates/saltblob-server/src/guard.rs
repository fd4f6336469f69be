//! Refusals: the requests saltblob does not serve, answered in one place before s3s sees them (so before any
//! signature check, body read or store access), each with the error AWS gives for it. `docs/s3.md`, *Refused
//! requests*, lists them; [`check`] applies them in this order:
//!
//! 1. `POST` with a `multipart/form-data` body (browser-form uploads): `501 NotImplemented`, before a byte of
//!    the body is read.
//! 2. Signature Version 2 in any form (`Authorization: AWS …`; a query with `Signature`, `AWSAccessKeyId` or
//!    `Expires`): `400 InvalidRequest`, as S3 regions that serve only SigV4.
//! 3. Presigned URLs (SigV4 query authentication): every parameter present, `X-Amz-Expires` in 1..=604800,
//!    the credential scope's service `s3`, `host` among `X-Amz-SignedHeaders`: else
//!    `403 AuthorizationQueryParametersError`.
//! 4. SigV4 header authentication: the credential scope's service `s3`, `host` and `x-amz-date` among
//!    `SignedHeaders`: else `400 AuthorizationHeaderMalformed`.
//! 5. A `versionId` on GET, HEAD and DELETE that is neither `null` nor a version id of ours (32 hex digits,
//!    `versioning.rs`): `400 InvalidArgument`.
//! 6. An empty `Content-MD5` (which s3s would read as none): `400 InvalidDigest`, as AWS.
//! 7. Server-side encryption headers on a GET or HEAD (`x-amz-server-side-encryption`, `-aws-kms-key-id`:
//!    encryption is chosen by the put, `sse/`): `400 InvalidArgument`, as AWS. On other requests, the same
//!    (or `-bucket-key-enabled`) as a query parameter: `501 NotImplemented` (s3s reads a put's SSE from its
//!    headers only; it would be dropped).
//! 8. Features saltblob does not have, named by a header or by the same name as a presigned URL's query parameter:
//!    server-side encryption with an encryption context (`x-amz-server-side-encryption-context`: the key providers
//!    take none) and with customer keys in the query string (SSE-C, `-customer-*`, is taken in headers only:
//!    `sse/customer.rs`), object lock (`x-amz-object-lock-*`, `x-amz-bucket-object-lock-enabled: true`) and tags in
//!    the query string (`x-amz-tagging`, `x-amz-tagging-directive`: taken in headers only): `501 NotImplemented`;
//!    ACLs other than the canned ones saltblob keeps (`acl.rs`: `x-amz-acl` `aws-exec-read`,
//!    `log-delivery-write` or anything else; any `x-amz-grant-*`): `400 AccessControlListNotSupported`. (A
//!    `PUT ?acl` whose ACL is in its body is decided by `acl.rs`, which reads it.)
//!
//! A refusal's message is fixed text: it never holds a key, a path or anything of the store.

use http::{HeaderMap, Method, StatusCode, Uri};
use saltblob_core::VersionId;

use crate::acl::{Canned, UNSUPPORTED_MESSAGE};
use crate::percent;
use crate::refusal::Refusal;

/// The longest a presigned URL may be valid, as on AWS: 7 days.
pub(crate) const MAX_PRESIGNED_EXPIRES_SECS: u64 = 604_800;

/// AWS's answer to a request signed with Signature Version 2 where only SigV4 is served.
const SIGV2_MESSAGE: &str =
    "The authorization mechanism you have provided is not supported. Please use AWS4-HMAC-SHA256.";
/// AWS's message for a request naming a feature it does not implement.
const NOT_IMPLEMENTED_MESSAGE: &str =
    "A header you provided implies functionality that is not implemented";
/// The server-side encryption headers a put takes (`sse/`) and a GET or HEAD refuses.
const SSE_PUT_HEADERS: [&str; 2] = [
    "x-amz-server-side-encryption",
    "x-amz-server-side-encryption-aws-kms-key-id",
];
/// The parameters a presigned URL must carry.
const PRESIGNED_PARAMETERS: [&str; 6] = [
    "X-Amz-Algorithm",
    "X-Amz-Credential",
    "X-Amz-Signature",
    "X-Amz-Date",
    "X-Amz-SignedHeaders",
    "X-Amz-Expires",
];

/// The refusals of the rules above, as AWS answers each.
impl Refusal {
    fn query_auth(message: impl Into<String>) -> Self {
        // AWS documents 400 for this code; S3's conformance suite (ceph/s3-tests, `x_amz_expires_out_*`)
        // expects 403 for the expiry bounds, and every query-authentication refusal answers alike.
        Self::new(
            "AuthorizationQueryParametersError",
            StatusCode::FORBIDDEN,
            message,
        )
    }

    fn header_auth(message: impl Into<String>) -> Self {
        Self::new(
            "AuthorizationHeaderMalformed",
            StatusCode::BAD_REQUEST,
            message,
        )
    }

    fn not_implemented(header: &str) -> Self {
        Self::new(
            "NotImplemented",
            StatusCode::NOT_IMPLEMENTED,
            NOT_IMPLEMENTED_MESSAGE,
        )
        .naming(header)
    }

    fn acl(header: &str) -> Self {
        Self::new(
            "AccessControlListNotSupported",
            StatusCode::BAD_REQUEST,
            UNSUPPORTED_MESSAGE,
        )
        .naming(header)
    }
}

/// The first rule of the module's list that refuses a request with this method, URI and headers; `None`
/// when it may go on to s3s.
pub(crate) fn check(method: &Method, uri: &Uri, headers: &HeaderMap) -> Option<Refusal> {
    let query = parse_query(uri.query().unwrap_or(""));
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());

    if method == Method::POST
        && header("content-type").is_some_and(|t| {
            t.trim_start()
                .get(..19)
                .is_some_and(|p| p.eq_ignore_ascii_case("multipart/form-data"))
        })
    {
        return Some(
            Refusal::new(
                "NotImplemented",
                StatusCode::NOT_IMPLEMENTED,
                "POST object uploads (HTML forms) are not implemented; upload with PUT",
            )
            .naming("Content-Type"),
        );
    }

    let authorization = header("authorization").map(str::trim_start);
    let sigv2 = authorization.is_some_and(|a| a.starts_with("AWS "))
        || ["Signature", "AWSAccessKeyId", "Expires"]
            .iter()
            .any(|p| param(p).is_some());
    if sigv2 {
        return Some(Refusal::new(
            "InvalidRequest",
            StatusCode::BAD_REQUEST,
            SIGV2_MESSAGE,
        ));
    }

    if param("X-Amz-Signature").is_some()
        || param("X-Amz-Credential").is_some()
        || param("X-Amz-Algorithm").is_some()
    {
        if let Some(refusal) = check_presigned(&param) {
            return Some(refusal);
        }
    } else if let Some(auth) = authorization.and_then(|a| a.strip_prefix("AWS4-HMAC-SHA256"))
        && let Some(refusal) = check_header_auth(auth)
    {
        return Some(refusal);
    }

    if matches!(*method, Method::GET | Method::HEAD | Method::DELETE)
        && param("versionId").is_some_and(|v| v != "null" && v.parse::<VersionId>().is_err())
    {
        return Some(Refusal::new(
            "InvalidArgument",
            StatusCode::BAD_REQUEST,
            "Invalid version id specified",
        ));
    }

    // s3s reads an empty header as no header: an empty Content-MD5 would be a write checked against nothing.
    if headers
        .get_all("content-md5")
        .iter()
        .any(|v| v.as_bytes().trim_ascii().is_empty())
    {
        return Some(
            Refusal::new(
                "InvalidDigest",
                StatusCode::BAD_REQUEST,
                "The Content-MD5 you specified is not valid.",
            )
            .naming("Content-MD5"),
        );
    }

    if matches!(*method, Method::GET | Method::HEAD)
        && let Some(name) = SSE_PUT_HEADERS
            .iter()
            .find(|h| header(h).is_some() || param(h).is_some())
    {
        return Some(
            Refusal::new(
                "InvalidArgument",
                StatusCode::BAD_REQUEST,
                format!("{name} header is not supported for this operation."),
            )
            .naming(name),
        );
    }

    // s3s reads the SSE of a put from its headers only: one named in the query (a presigned URL's parameter)
    // would be dropped and the object stored in plaintext.
    if let Some((name, _)) = query.iter().find(|(k, _)| {
        let k = k.to_ascii_lowercase();
        SSE_PUT_HEADERS.contains(&k.as_str())
            || k == "x-amz-server-side-encryption-bucket-key-enabled"
    }) && !matches!(*method, Method::GET | Method::HEAD)
    {
        return Some(Refusal::new(
            "NotImplemented",
            StatusCode::NOT_IMPLEMENTED,
            "Server-side encryption in the query string is not implemented: send it as a header (and sign it)",
        ).naming(&name.to_ascii_lowercase()));
    }

    let named = headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned(), false)))
        .chain(
            query
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.clone(), true)),
        );
    for (name, value, in_query) in named {
        if let Some(refusal) = check_feature(&name, value.trim(), in_query) {
            return Some(refusal);
        }
    }
    None
}

/// Whether header `name` (lowercase) is one of SSE-C's, the request's or its copy source's (`sse/customer.rs`).
fn is_customer_header(name: &str) -> bool {
    name.starts_with("x-amz-server-side-encryption-customer-")
        || name.starts_with("x-amz-copy-source-server-side-encryption-customer-")
}

/// The refusal for a header (or, `in_query`, presigned query parameter) `name` (lowercase) with `value` that
/// names a feature saltblob does not have. SSE-C is taken in headers only: s3s reads it from there, so a key in
/// the query would be dropped (and a put stored unsealed).
fn check_feature(name: &str, value: &str, in_query: bool) -> Option<Refusal> {
    let sse = (name.starts_with("x-amz-server-side-encryption")
        && !SSE_PUT_HEADERS.contains(&name)
        && name != "x-amz-server-side-encryption-bucket-key-enabled"
        || name.starts_with("x-amz-copy-source-server-side-encryption"))
        && (in_query || !is_customer_header(name));
    let lock = name.starts_with("x-amz-object-lock-")
        || (name == "x-amz-bucket-object-lock-enabled" && value.eq_ignore_ascii_case("true"));
    // Tags are taken in headers (s3s reads them from there: in the query they would be dropped).
    let tagging = in_query && (name == "x-amz-tagging" || name == "x-amz-tagging-directive");
    if sse || lock || tagging {
        return Some(Refusal::not_implemented(name));
    }
    let acl =
        (name == "x-amz-acl" && Canned::parse(value).is_none()) || name.starts_with("x-amz-grant-");
    acl.then(|| Refusal::acl(name))
}

/// The refusal of a presigned URL whose parameters (`param`) are missing or out of bounds.
fn check_presigned<'a>(param: &impl Fn(&str) -> Option<&'a str>) -> Option<Refusal> {
    if PRESIGNED_PARAMETERS.iter().any(|p| param(p).is_none()) {
        return Some(Refusal::query_auth(
            "Query-string authentication version 4 requires the X-Amz-Algorithm, X-Amz-Credential, \
             X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.",
        ));
    }
    let expires = param("X-Amz-Expires").unwrap_or_default().trim();
    let refusal = match expires.parse::<i64>() {
        Err(_) => Some("X-Amz-Expires should be a number"),
        Ok(n) if n < 0 => Some("X-Amz-Expires must be non-negative"),
        Ok(0) => Some("X-Amz-Expires must be at least 1 second"),
        Ok(n) if n.unsigned_abs() > MAX_PRESIGNED_EXPIRES_SECS => {
            Some("X-Amz-Expires must be less than a week (in seconds) that is 7 days")
        }
        Ok(_) => None,
    };
    if let Some(message) = refusal {
        return Some(Refusal::query_auth(message));
    }
    let credential = param("X-Amz-Credential").unwrap_or_default();
    if let Some(service) = scope_service(credential)
        && service != "s3"
    {
        return Some(Refusal::query_auth(format!(
            "Error parsing the X-Amz-Credential parameter; incorrect service \"{}\". This endpoint belongs \
             to \"s3\".",
            printable(service)
        )));
    }
    let signed = param("X-Amz-SignedHeaders").unwrap_or_default();
    if !signed
        .split(';')
        .any(|h| h.trim().eq_ignore_ascii_case("host"))
    {
        return Some(Refusal::query_auth("X-Amz-SignedHeaders must include host"));
    }
    None
}

/// The refusal of SigV4 header authentication `auth` (what follows `AWS4-HMAC-SHA256`) whose scope names
/// another service or whose signed headers leave out `host` or `x-amz-date`. An `auth` that does not parse is
/// left to s3s, which refuses it.
fn check_header_auth(auth: &str) -> Option<Refusal> {
    let field = |name: &str| {
        auth.split(',').find_map(|part| {
            let (k, v) = part.trim().split_once('=')?;
            (k.trim() == name).then(|| v.trim())
        })
    };
    if let Some(service) = field("Credential").and_then(scope_service)
        && service != "s3"
    {
        return Some(Refusal::header_auth(format!(
            "The authorization header is malformed; incorrect service \"{}\". This endpoint belongs to \"s3\".",
            printable(service)
        )));
    }
    let signed = field("SignedHeaders")?;
    let has = |name: &str| {
        signed
            .split(';')
            .any(|h| h.trim().eq_ignore_ascii_case(name))
    };
    if !has("host") || !has("x-amz-date") {
        return Some(Refusal::header_auth(
            "The authorization header is malformed; SignedHeaders must include host and x-amz-date.",
        ));
    }
    None
}

/// The service of a credential `ACCESS_KEY/DATE/REGION/SERVICE/aws4_request`, if it has that shape.
fn scope_service(credential: &str) -> Option<&str> {
    let parts: Vec<&str> = credential.trim().rsplitn(5, '/').collect();
    match parts[..] {
        ["aws4_request", service, _region, _date, _key] => Some(service),
        _ => None,
    }
}

/// `text` cut to 32 printable ASCII characters, for a message that repeats what a client sent.
fn printable(text: &str) -> String {
    text.chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(32)
        .collect()
}

/// The query's `name=value` pairs, %-decoded (`+` stays `+`, as SigV4 reads it).
fn parse_query(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent::decode(k, false), percent::decode(v, false))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(method: Method, uri: &str, headers: &[(&str, &str)]) -> Option<(String, u16)> {
        let mut map = HeaderMap::new();
        for (k, v) in headers {
            map.append(
                http::HeaderName::from_bytes(k.as_bytes()).expect("name"),
                http::HeaderValue::from_str(v).expect("value"),
            );
        }
        let uri: Uri = uri.parse().expect("uri");
        check(&method, &uri, &map).map(|r| (r.code.to_owned(), r.status.as_u16()))
    }

    const V4: &str = "AWS4-HMAC-SHA256 Credential=AK/20250101/us-east-1/s3/aws4_request, \
                      SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature=abc";

    fn presigned(expires: &str, credential: &str, signed: &str) -> String {
        format!(
            "/b/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={credential}&X-Amz-Date=20250101T000000Z\
             &X-Amz-Expires={expires}&X-Amz-SignedHeaders={signed}&X-Amz-Signature=abc"
        )
    }

    #[test]
    fn ordinary_requests_pass() {
        for (method, uri, headers) in [
            (Method::GET, "/b/k", vec![("authorization", V4)]),
            (Method::GET, "/b/k?versionId=null", vec![]),
            (
                Method::PUT,
                "/b/k",
                vec![
                    ("x-amz-acl", "bucket-owner-full-control"),
                    ("x-amz-tagging-directive", "COPY"),
                ],
            ),
            (
                Method::PUT,
                "/b",
                vec![("x-amz-bucket-object-lock-enabled", "false")],
            ),
            (
                Method::POST,
                "/b?delete",
                vec![("content-type", "text/xml")],
            ),
        ] {
            assert_eq!(refused(method, uri, &headers), None, "{uri} {headers:?}");
        }
        let ok = presigned(
            "604800",
            "AK%2F20250101%2Fus-east-1%2Fs3%2Faws4_request",
            "host",
        );
        assert_eq!(refused(Method::GET, &ok, &[]), None);
    }

    #[test]
    fn each_rule_refuses_with_aws_code() {
        let query_auth = Some(("AuthorizationQueryParametersError".to_owned(), 403));
        let cred = "AK%2F20250101%2Fus-east-1%2Fs3%2Faws4_request";
        for expires in ["0", "-7", "604801", "4294967295", "abc", ""] {
            assert_eq!(
                refused(Method::GET, &presigned(expires, cred, "host"), &[]),
                query_auth,
                "{expires}"
            );
        }
        let sts = "AK%2F20250101%2Fus-east-1%2Fsts%2Faws4_request";
        assert_eq!(
            refused(Method::GET, &presigned("60", sts, "host"), &[]),
            query_auth
        );
        assert_eq!(
            refused(Method::GET, &presigned("60", cred, "x-amz-date"), &[]),
            query_auth
        );
        let malformed = Some(("AuthorizationHeaderMalformed".to_owned(), 400));
        for auth in [
            V4.replace("/s3/", "/sts/"),
            V4.replace("host;", ""),
            V4.replace(";x-amz-date", ""),
        ] {
            assert_eq!(
                refused(Method::GET, "/b/k", &[("authorization", &auth)]),
                malformed
            );
        }
        for empty in ["", "  "] {
            assert_eq!(
                refused(Method::PUT, "/b/k", &[("content-md5", empty)]),
                Some(("InvalidDigest".to_owned(), 400)),
                "{empty:?}"
            );
        }
        let sigv2 = Some(("InvalidRequest".to_owned(), 400));
        assert_eq!(
            refused(Method::PUT, "/b/k", &[("authorization", "AWS AK:c2ln")]),
            sigv2
        );
        for q in ["Signature=x", "AWSAccessKeyId=AK", "Expires=4102444800"] {
            assert_eq!(refused(Method::GET, &format!("/b/k?{q}"), &[]), sigv2);
        }
        assert_eq!(
            refused(
                Method::POST,
                "/b",
                &[("content-type", "multipart/form-data; boundary=x")]
            ),
            Some(("NotImplemented".to_owned(), 501))
        );
        for method in [Method::GET, Method::HEAD, Method::DELETE] {
            assert_eq!(
                refused(method, "/b/k?versionId=3HL4kqtJlcpXroDTDmJ", &[]),
                Some(("InvalidArgument".to_owned(), 400))
            );
        }
        let not_implemented = Some(("NotImplemented".to_owned(), 501));
        for header in [
            ("x-amz-server-side-encryption", "AES256"),
            ("x-amz-server-side-encryption", "aws:kms"),
            ("x-amz-server-side-encryption-aws-kms-key-id", "k"),
            ("x-amz-server-side-encryption-bucket-key-enabled", "true"),
        ] {
            assert_eq!(refused(Method::PUT, "/b/k", &[header]), None, "{header:?}");
            assert_eq!(refused(Method::POST, "/b/k?uploads", &[header]), None);
        }
        let invalid = Some(("InvalidArgument".to_owned(), 400));
        for method in [Method::GET, Method::HEAD] {
            assert_eq!(
                refused(
                    method,
                    "/b/k",
                    &[("x-amz-server-side-encryption", "AES256")]
                ),
                invalid
            );
        }
        for header in [
            ("x-amz-server-side-encryption-context", "e30="),
            ("x-amz-object-lock-mode", "COMPLIANCE"),
            (
                "x-amz-object-lock-retain-until-date",
                "2099-01-01T00:00:00Z",
            ),
            ("x-amz-object-lock-legal-hold", "ON"),
            ("x-amz-bucket-object-lock-enabled", "true"),
        ] {
            assert_eq!(
                refused(Method::PUT, "/b/k", &[header]),
                not_implemented,
                "{header:?}"
            );
        }
        // SSE-C in headers is for sse/customer.rs to check.
        for header in [
            ("x-amz-server-side-encryption-customer-algorithm", "AES256"),
            ("x-amz-server-side-encryption-customer-key", "a2V5"),
            ("x-amz-server-side-encryption-customer-key-md5", "bWQ1"),
            (
                "x-amz-copy-source-server-side-encryption-customer-algorithm",
                "AES256",
            ),
        ] {
            for method in [Method::PUT, Method::GET, Method::HEAD] {
                assert_eq!(refused(method, "/b/k", &[header]), None, "{header:?}");
            }
        }
        let sse_query = format!(
            "{}&x-amz-server-side-encryption-customer-algorithm=AES256",
            presigned("60", cred, "host")
        );
        assert_eq!(refused(Method::GET, &sse_query, &[]), not_implemented);
        let sse_put_query = format!(
            "{}&x-amz-server-side-encryption=AES256",
            presigned("60", cred, "host")
        );
        assert_eq!(refused(Method::PUT, &sse_put_query, &[]), not_implemented);
        // Tags in headers are for the operations to check; in a presigned URL's query they are refused.
        for header in [
            ("x-amz-tagging", "a=b"),
            ("x-amz-tagging-directive", "REPLACE"),
        ] {
            assert_eq!(refused(Method::PUT, "/b/k", &[header]), None, "{header:?}");
        }
        let tags_query = format!("{}&x-amz-tagging=a%3Db", presigned("60", cred, "host"));
        assert_eq!(refused(Method::PUT, &tags_query, &[]), not_implemented);
        assert_eq!(
            refused(Method::GET, &sse_put_query, &[]),
            Some(("InvalidArgument".to_owned(), 400))
        );
        let acl = Some(("AccessControlListNotSupported".to_owned(), 400));
        for header in [
            ("x-amz-acl", "aws-exec-read"),
            ("x-amz-acl", "log-delivery-write"),
            ("x-amz-acl", "Public-Read"),
            (
                "x-amz-grant-read",
                "uri=\"http://acs.amazonaws.com/groups/global/AllUsers\"",
            ),
            ("x-amz-grant-full-control", "id=x"),
        ] {
            assert_eq!(refused(Method::PUT, "/b/k", &[header]), acl, "{header:?}");
        }
        assert_eq!(
            refused(Method::PUT, "/b/k?acl", &[("x-amz-acl", "aws-exec-read")]),
            acl
        );
        // The canned ACLs saltblob keeps pass; an ACL in the body is for acl.rs to read.
        for canned in ["public-read", "public-read-write", "authenticated-read"] {
            assert_eq!(
                refused(Method::PUT, "/b/k?acl", &[("x-amz-acl", canned)]),
                None
            );
        }
        assert_eq!(refused(Method::PUT, "/b/k?acl", &[]), None);
    }

    #[test]
    fn error_documents_escape_and_name_the_header() {
        let r = Refusal::not_implemented("x-amz-tagging");
        let xml = r.xml("ABC<1>");
        assert!(
            xml.contains("<Code>NotImplemented</Code>")
                && xml.contains("<Header>x-amz-tagging</Header>")
                && xml.contains("<RequestId>ABC&lt;1&gt;</RequestId>"),
            "{xml}"
        );
    }
}
