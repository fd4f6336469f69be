//! What the object operations need around s3s, in [`call`], which the server's request wrapper calls in place
//! of the S3 service itself:
//! - a `Range` header of a GET or HEAD that does not parse (several ranges, `bytes=5-2`, another unit) is
//!   dropped before s3s sees it, since s3s answers it `400 InvalidArgument` before any handler runs while RFC
//!   9110 and AWS ignore it and answer the whole object. Only an unsigned header is dropped (anonymous requests,
//!   presigned URLs, signatures that leave `range` out): a signature that covers the header would no longer
//!   match, and s3s checks the Range after the signature with no hook in between, so a signed unparsable Range
//!   still gets s3s's 400;
//! - a CopyObject still running when its response starts gets the body that keeps the connection alive until
//!   the copy ends (`copy.rs`);
//! - a HeadObject of a range or a part answers 206, as AWS (s3s 0.14 sends a HEAD's status as 200 whatever the
//!   handler says): the handler marks its response with [`PartialContent`];
//! - a GetObjectAttributes response carries its ETag unquoted, as AWS (s3s quotes every ETag in XML): the
//!   handler marks its response with [`UnquotedETag`].

use http::{Method, header};
use s3s::dto::Range;
use s3s::service::S3Service;
use s3s::{HttpError, HttpRequest, HttpResponse};

use super::attributes::UnquotedETag;
use super::copy;

/// Calls `service` with `req`, adjusted as the module doc says, and adjusts its response.
///
/// # Errors
/// The service's own failure (not an S3 error: those are responses).
pub(crate) async fn call(
    service: &S3Service,
    mut req: HttpRequest,
) -> Result<HttpResponse, HttpError> {
    ignore_unparsable_range(&mut req);
    let mut response = service.call(req).await?;
    copy::keep_alive_body(&mut response);
    if response
        .extensions_mut()
        .remove::<PartialContent>()
        .is_some()
    {
        *response.status_mut() = http::StatusCode::PARTIAL_CONTENT;
    }
    if response.extensions_mut().remove::<UnquotedETag>().is_some() {
        unquote_etag(&mut response);
    }
    Ok(response)
}

/// Takes the quotes s3s put around the `ETag` of `response`'s XML body off (a body s3s made whole, as it makes
/// every XML one).
fn unquote_etag(response: &mut HttpResponse) {
    let Some(body) = response.body().bytes() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(&body) else {
        return;
    };
    let unquoted = text
        .replace("<ETag>\"", "<ETag>")
        .replace("\"</ETag>", "</ETag>");
    response.headers_mut().remove(header::CONTENT_LENGTH);
    *response.body_mut() = s3s::Body::from(unquoted);
}

/// Marks a response (in its extensions) whose status must be 206 Partial Content.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PartialContent;

/// Drops the `Range` headers of a GET or HEAD when they do not make one range s3s can parse and no signature
/// covers them.
fn ignore_unparsable_range<B>(req: &mut http::Request<B>) {
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        return;
    }
    let mut values = req.headers().get_all(header::RANGE).iter();
    let Some(first) = values.next() else {
        return;
    };
    let parses =
        values.next().is_none() && first.to_str().is_ok_and(|v| Range::parse(v.trim()).is_ok());
    if !parses && !range_is_signed(req) {
        req.headers_mut().remove(header::RANGE);
    }
}

/// Whether the request's SigV4 signature covers its `Range` header: `range` among the `SignedHeaders` of its
/// `Authorization` header or its presigned URL's `X-Amz-SignedHeaders`.
fn range_is_signed<B>(req: &http::Request<B>) -> bool {
    let names_range = |list: &str| {
        list.split(';')
            .any(|name| name.trim().eq_ignore_ascii_case("range"))
    };
    let in_header = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split("SignedHeaders=").nth(1))
        .is_some_and(|rest| names_range(rest.split([',', ' ']).next().unwrap_or_default()));
    let in_query = req.uri().query().is_some_and(|query| {
        query.split('&').any(|pair| {
            pair.split_once('=').is_some_and(|(name, value)| {
                name.eq_ignore_ascii_case("X-Amz-SignedHeaders")
                    && names_range(&value.replace("%3B", ";").replace("%3b", ";"))
            })
        })
    });
    in_header || in_query
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(range: &[&str], authorization: Option<&str>, query: &str) -> http::Request<()> {
        let mut builder = http::Request::get(format!("http://h/b/k{query}"));
        for r in range {
            builder = builder.header(header::RANGE, *r);
        }
        if let Some(a) = authorization {
            builder = builder.header(header::AUTHORIZATION, a);
        }
        builder.body(()).expect("request")
    }

    fn kept(req: &mut http::Request<()>) -> Vec<String> {
        ignore_unparsable_range(req);
        req.headers()
            .get_all(header::RANGE)
            .iter()
            .map(|v| v.to_str().expect("ascii").to_owned())
            .collect()
    }

    #[test]
    fn unparsable_unsigned_ranges_are_dropped_and_the_rest_kept() {
        for bad in ["bytes=5-2", "bytes=0-1,4-5", "items=0-1", "bytes=x-", ""] {
            assert!(kept(&mut request(&[bad], None, "")).is_empty(), "{bad}");
        }
        assert!(kept(&mut request(&["bytes=0-1", "bytes=2-3"], None, "")).is_empty());
        for good in ["bytes=0-9", "bytes=5-", "bytes=-3"] {
            assert_eq!(kept(&mut request(&[good], None, "")), [good]);
        }
        let signed = "AWS4-HMAC-SHA256 Credential=A/20260101/us-east-1/s3/aws4_request, \
                      SignedHeaders=host;range;x-amz-date, Signature=00";
        assert_eq!(
            kept(&mut request(&["bytes=5-2"], Some(signed), "")),
            ["bytes=5-2"]
        );
        let unsigned_range = signed.replace("range;", "");
        assert!(kept(&mut request(&["bytes=5-2"], Some(&unsigned_range), "")).is_empty());
        let presigned = "?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-SignedHeaders=host%3Brange";
        assert_eq!(
            kept(&mut request(&["bytes=5-2"], None, presigned)),
            ["bytes=5-2"]
        );
        let presigned_host = "?X-Amz-SignedHeaders=host&X-Amz-Signature=00";
        assert!(kept(&mut request(&["bytes=5-2"], None, presigned_host)).is_empty());
    }
}
