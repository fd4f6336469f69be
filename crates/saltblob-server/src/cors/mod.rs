//! Bucket CORS (`docs/s3.md`, "CORS"): the rules that let web pages of other origins use a bucket from a
//! browser.
//!
//! - Put/Get/DeleteBucketCors (`bucket/cors.rs`) keep a bucket's rules in its CORS record (`keys.rs`,
//!   `record.rs`), which names the bucket record's version it was written for: rules left behind by a deleted
//!   bucket never apply to a new bucket of the same name.
//! - A preflight (`OPTIONS` with `Origin` and `Access-Control-Request-Method`) is answered here, unsigned as
//!   browsers send it, before anything else looks at the request ([`preflight`]): 200 with the
//!   `Access-Control-*` headers of the first rule that allows the origin, the method and every header asked
//!   for; 403 otherwise (also for a bucket that does not exist, so that an unsigned request learns nothing of
//!   which buckets exist); 400 without those two headers.
//! - Any other request with an `Origin` gets the `Access-Control-*` headers of the first rule allowing its
//!   origin and method, whatever its status ([`BrowserRequest::answer`]), so that the page can read an error
//!   too. The rules never grant access: the request is checked as any other.

mod record;
mod rules;

use std::sync::Arc;

use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode};
use saltblob_core::{BlobStore, Error, PutOptions};

pub(crate) use self::rules::Cors;
use crate::cache::Cache;
use crate::keys::{bucket_key, cors_key};
use crate::record_reader::read_setting;
use crate::refusal::Refusal;

/// The content type of CORS records.
const CONTENT_TYPE: &str = "application/x-saltblob-cors";

/// `Vary` of every answer from a bucket with rules to a request with an `Origin`: the answer depends on them.
const VARY: &str = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method";

/// The buckets' CORS rules, as read lately: shared by the S3 operations (which change them) and the request
/// handler (which answers browsers with them).
pub(crate) struct CorsRules {
    store: BlobStore,
    /// Each bucket's rules as they apply to it (none for a missing bucket), read less than a second ago.
    applied: Cache<Cors>,
}

impl CorsRules {
    /// The rules of the buckets of `store`.
    pub(crate) fn new(store: BlobStore) -> Self {
        Self {
            store,
            applied: Cache::default(),
        }
    }

    /// The rules that apply to `bucket` now (`None`: it has none, or it does not exist), possibly as read less
    /// than a second ago.
    ///
    /// # Errors
    /// The store's.
    pub(crate) async fn applied(&self, bucket: &str) -> saltblob_core::Result<Option<Arc<Cors>>> {
        self.applied.read(bucket, self.read_applied(bucket)).await
    }

    async fn read_applied(&self, bucket: &str) -> saltblob_core::Result<Option<Cors>> {
        let record = match self.store.head(bucket_key(bucket)).await {
            Ok(m) => m,
            Err(Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(e),
        };
        Ok(self
            .stored(bucket)
            .await?
            .filter(|c| c.bucket_version == record.version))
    }

    /// The record of `bucket` as stored, whatever bucket record it was written for; `None` when there is none
    /// or it does not decode (logged: a damaged record answers no browser).
    ///
    /// # Errors
    /// The store's.
    pub(crate) async fn stored(&self, bucket: &str) -> saltblob_core::Result<Option<Cors>> {
        let key = cors_key(bucket);
        let consequence = "no browser request is allowed";
        read_setting(&self.store, bucket, &key, "CORS", consequence, Cors::decode).await
    }

    /// Writes `cors` as `bucket`'s record.
    ///
    /// # Errors
    /// The store's.
    pub(crate) async fn put(&self, bucket: &str, cors: &Cors) -> saltblob_core::Result<()> {
        let opts = PutOptions::new().with_content_type(CONTENT_TYPE);
        let put = self.store.put(cors_key(bucket), cors.encode(), &opts).await;
        self.applied.forget(bucket);
        put.map(|_| ())
    }

    /// Deletes `bucket`'s record (whether or not it has one).
    ///
    /// # Errors
    /// The store's.
    pub(crate) async fn delete(&self, bucket: &str) -> saltblob_core::Result<()> {
        let deleted = self.store.delete(cors_key(bucket)).await;
        self.applied.forget(bucket);
        deleted.map(|_| ())
    }
}

/// What a request from a browser says of itself: the bucket, the page's origin, the method it asks about (a
/// preflight's `Access-Control-Request-Method`, else its own) and the headers it asks to send.
#[derive(Debug)]
pub(crate) struct BrowserRequest {
    bucket: String,
    origin: String,
    method: String,
    /// The preflight's `Access-Control-Request-Headers`, as sent.
    request_headers: Option<String>,
}

impl BrowserRequest {
    /// The browser request `req` is: `None` without an `Origin` or a bucket in its path.
    pub(crate) fn of<B>(req: &Request<B>) -> Option<Self> {
        let headers = req.headers();
        let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let origin = text("origin")?.to_owned();
        let bucket = bucket_of(req.uri().path())?.to_owned();
        // A request that names the method it is about (a preflight does; RGW, and S3's conformance suite, also
        // read it on the request itself): that one, else the request's own.
        let method = text("access-control-request-method")
            .map_or_else(|| req.method().as_str().to_owned(), str::to_owned);
        Some(Self {
            bucket,
            origin,
            method,
            request_headers: text("access-control-request-headers").map(str::to_owned),
        })
    }

    /// Adds to `headers` (an answer to this request, whatever its status) the `Access-Control-*` headers of the
    /// first rule of the bucket that allows the origin and the method, and `Vary` if the bucket has rules. A
    /// failure to read the rules is logged and adds nothing.
    pub(crate) async fn answer(&self, rules: &CorsRules, headers: &mut HeaderMap) {
        let cors = match rules.applied(&self.bucket).await {
            Ok(Some(cors)) => cors,
            Ok(None) => return,
            Err(e) => {
                tracing::warn!(bucket = self.bucket, error = %e, "reading the CORS rules failed");
                return;
            }
        };
        headers.insert(http::header::VARY, HeaderValue::from_static(VARY));
        if let Some(rule) = cors.matching(&self.origin, &self.method, &[]) {
            headers.extend(rule.response_headers(&self.origin, None));
        }
    }
}

/// Answers the preflight `req` (an `OPTIONS` request): the headers of a 200, or why it is refused.
pub(crate) async fn preflight<B>(
    rules: &CorsRules,
    req: &Request<B>,
) -> Result<Vec<(HeaderName, HeaderValue)>, Refusal> {
    let bad = |message: &str| Refusal::new("BadRequest", StatusCode::BAD_REQUEST, message);
    if req.headers().get("origin").is_none() {
        return Err(bad(
            "Insufficient information. Origin request header needed.",
        ));
    }
    let Some(browser) = BrowserRequest::of(req) else {
        return Err(bad("A CORS preflight request names a bucket in its path."));
    };
    match req.headers().get("access-control-request-method") {
        None => {
            return Err(bad(
                "Insufficient information. Access-Control-Request-Method request header needed.",
            ));
        }
        Some(_) if Method::from_bytes(browser.method.as_bytes()).is_err() => {
            return Err(bad(&format!(
                "Invalid Access-Control-Request-Method: {}",
                browser.method
            )));
        }
        Some(_) => {}
    }
    let cors = rules.applied(&browser.bucket).await.map_err(|e| {
        tracing::warn!(bucket = browser.bucket, error = %e, "reading the CORS rules failed");
        Refusal::new(
            "InternalError",
            StatusCode::INTERNAL_SERVER_ERROR,
            "We encountered an internal error. Please try again.",
        )
    })?;
    let asked: Vec<&str> = browser
        .request_headers
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    let rule = cors
        .as_deref()
        .and_then(|c| c.matching(&browser.origin, &browser.method, &asked));
    let Some(rule) = rule else {
        return Err(Refusal::new(
            "AccessForbidden",
            StatusCode::FORBIDDEN,
            "CORSResponse: This CORS request is not allowed. This is usually because the evaluation of Origin, \
             request method / Access-Control-Request-Method or Access-Control-Request-Headers are not \
             whitelisted by the resource's CORS spec.",
        ));
    };
    let mut headers = rule.response_headers(&browser.origin, browser.request_headers.as_deref());
    headers.push((http::header::VARY, HeaderValue::from_static(VARY)));
    Ok(headers)
}

/// The bucket a path-style request's `path` names: its first segment, if it is a bucket name.
fn bucket_of(path: &str) -> Option<&str> {
    let segment = path.strip_prefix('/')?.split('/').next()?;
    let valid = (3..=63).contains(&segment.len())
        && segment
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-');
    valid.then_some(segment)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn browser_requests_name_a_bucket_an_origin_and_a_method() {
        let req = |method: &str, path: &str, headers: &[(&str, &str)]| {
            let mut b = Request::builder().method(method).uri(path);
            for (n, v) in headers {
                b = b.header(*n, *v);
            }
            b.body(()).expect("request")
        };
        let get = BrowserRequest::of(&req(
            "GET",
            "/bkt/a/b?x=1",
            &[("origin", "https://a.example")],
        ))
        .expect("a browser request");
        assert_eq!((get.bucket.as_str(), get.method.as_str()), ("bkt", "GET"));
        let asked = BrowserRequest::of(&req(
            "OPTIONS",
            "/bkt",
            &[
                ("origin", "o"),
                ("access-control-request-method", "PUT"),
                ("access-control-request-headers", "content-type"),
            ],
        ))
        .expect("a preflight");
        assert_eq!(asked.method, "PUT");
        assert_eq!(asked.request_headers.as_deref(), Some("content-type"));
        assert!(BrowserRequest::of(&req("GET", "/bkt", &[])).is_none());
        assert!(BrowserRequest::of(&req("GET", "/", &[("origin", "o")])).is_none());
        assert!(BrowserRequest::of(&req("GET", "/Not_A_Bucket/k", &[("origin", "o")])).is_none());
        assert_eq!(bucket_of("/my.bucket-1/key"), Some("my.bucket-1"));
        assert_eq!(bucket_of("/ab"), None);
    }
}
