//! A bucket's CORS rules: checked from PutBucketCors's configuration, shown back by GetBucketCors, and matched
//! against a browser's request (its `Origin`, its method and the headers it asks to send).

use http::{HeaderName, HeaderValue};
use s3s::dto::{CORSConfiguration, CORSRule};
use s3s::{S3Result, s3_error};
use saltblob_core::VersionId;

/// Most rules a configuration holds (as AWS).
pub(crate) const MAX_RULES: usize = 100;
/// Most values each list of a rule holds (origins, methods, allowed and exposed headers).
pub(crate) const MAX_VALUES: usize = 100;
/// Longest origin, header name or header pattern, in bytes.
pub(crate) const MAX_VALUE_LEN: usize = 1024;
/// Longest rule `ID`, in bytes (as AWS).
pub(crate) const MAX_ID_LEN: usize = 255;
/// The methods a rule may allow (as AWS).
const METHODS: [&str; 5] = ["GET", "PUT", "HEAD", "POST", "DELETE"];

/// A bucket's CORS configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Cors {
    /// The bucket record's version it was written for: a deleted bucket's rules never apply to a new one.
    pub bucket_version: VersionId,
    /// In the order given: the first that matches a request answers it.
    pub rules: Vec<Rule>,
}

/// One `CORSRule`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Rule {
    /// Empty when the rule has no `ID`.
    pub id: String,
    /// Each one of [`METHODS`].
    pub methods: Vec<String>,
    /// Patterns with at most one `*` each.
    pub origins: Vec<String>,
    /// Patterns (with at most one `*`) of the headers a preflight may ask to send, matched ignoring case.
    pub allowed_headers: Vec<String>,
    /// Response headers a browser may show the page (`Access-Control-Expose-Headers`).
    pub expose_headers: Vec<String>,
    /// How long a browser may keep the preflight's answer, in seconds.
    pub max_age: Option<u32>,
}

impl Cors {
    /// The configuration PutBucketCors gives, for the bucket whose record is `bucket_version`.
    ///
    /// # Errors
    /// `MalformedXML` without a rule or with a rule without an origin or a method; `InvalidRequest` for more
    /// than [`MAX_RULES`] rules, a method other than GET, PUT, HEAD, POST and DELETE (case matters, as on AWS),
    /// an origin or allowed header with more than one `*`, an exposed header that is not a header name, a list
    /// of more than [`MAX_VALUES`] values or a value longer than [`MAX_VALUE_LEN`] bytes; `InvalidArgument` for
    /// an `ID` longer than 255 bytes or a negative `MaxAgeSeconds`.
    pub(crate) fn from_config(
        config: CORSConfiguration,
        bucket_version: VersionId,
    ) -> S3Result<Self> {
        if config.cors_rules.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "A CORSConfiguration has at least one CORSRule"
            ));
        }
        if config.cors_rules.len() > MAX_RULES {
            return Err(s3_error!(
                InvalidRequest,
                "A CORSConfiguration has at most {MAX_RULES} rules, not {}",
                config.cors_rules.len()
            ));
        }
        let rules = config
            .cors_rules
            .into_iter()
            .map(Rule::from_dto)
            .collect::<S3Result<Vec<_>>>()?;
        Ok(Self {
            bucket_version,
            rules,
        })
    }

    /// As GetBucketCors returns it.
    pub(crate) fn to_config(&self) -> Vec<CORSRule> {
        self.rules.iter().map(Rule::to_dto).collect()
    }

    /// The first rule that lets a page of `origin` send a `method` request with `headers` (names as the
    /// preflight's `Access-Control-Request-Headers` lists them).
    pub(crate) fn matching(&self, origin: &str, method: &str, headers: &[&str]) -> Option<&Rule> {
        self.rules.iter().find(|r| {
            r.methods.iter().any(|m| m == method)
                && r.origins.iter().any(|o| wildcard_match(o, origin, false))
                && headers.iter().all(|h| {
                    r.allowed_headers
                        .iter()
                        .any(|allowed| wildcard_match(allowed, h, true))
                })
        })
    }
}

impl Rule {
    fn from_dto(rule: CORSRule) -> S3Result<Self> {
        let id = rule.id.unwrap_or_default();
        if id.len() > MAX_ID_LEN {
            return Err(s3_error!(
                InvalidArgument,
                "A CORSRule's ID is at most {MAX_ID_LEN} bytes"
            ));
        }
        if rule.allowed_methods.is_empty() || rule.allowed_origins.is_empty() {
            return Err(s3_error!(
                MalformedXML,
                "A CORSRule has at least one AllowedMethod and one AllowedOrigin"
            ));
        }
        let allowed_headers = rule.allowed_headers.unwrap_or_default();
        let expose_headers = rule.expose_headers.unwrap_or_default();
        for (what, values) in [
            ("AllowedMethod", &rule.allowed_methods),
            ("AllowedOrigin", &rule.allowed_origins),
            ("AllowedHeader", &allowed_headers),
            ("ExposeHeader", &expose_headers),
        ] {
            check_values(what, values)?;
        }
        if let Some(m) = rule
            .allowed_methods
            .iter()
            .find(|m| !METHODS.contains(&m.as_str()))
        {
            return Err(s3_error!(
                InvalidRequest,
                "Found unsupported HTTP method in CORS config. Unsupported method is {m}"
            ));
        }
        for (what, values) in [
            ("AllowedOrigin", &rule.allowed_origins),
            ("AllowedHeader", &allowed_headers),
        ] {
            if let Some(v) = values.iter().find(|v| v.matches('*').count() > 1) {
                return Err(s3_error!(
                    InvalidRequest,
                    "{what} \"{v}\" can not have more than one wildcard."
                ));
            }
        }
        if let Some(h) = expose_headers
            .iter()
            .find(|h| HeaderName::from_bytes(h.as_bytes()).is_err())
        {
            return Err(s3_error!(
                InvalidRequest,
                "ExposeHeader \"{h}\" is not a header name"
            ));
        }
        let max_age = match rule.max_age_seconds {
            None => None,
            Some(s) => Some(u32::try_from(s).map_err(|_| {
                s3_error!(
                    InvalidArgument,
                    "MaxAgeSeconds must not be negative, not {s}"
                )
            })?),
        };
        Ok(Self {
            id,
            methods: rule.allowed_methods,
            origins: rule.allowed_origins,
            allowed_headers,
            expose_headers,
            max_age,
        })
    }

    fn to_dto(&self) -> CORSRule {
        let some = |v: &Vec<String>| (!v.is_empty()).then(|| v.clone());
        CORSRule {
            id: (!self.id.is_empty()).then(|| self.id.clone()),
            allowed_methods: self.methods.clone(),
            allowed_origins: self.origins.clone(),
            allowed_headers: some(&self.allowed_headers),
            expose_headers: some(&self.expose_headers),
            max_age_seconds: self.max_age.and_then(|s| i32::try_from(s).ok()),
        }
    }

    /// The `Access-Control-*` headers of an answer to a page of `origin` this rule matched; a preflight's also
    /// name the `headers` it asked for (as it sent them).
    pub(crate) fn response_headers(
        &self,
        origin: &str,
        preflight_headers: Option<&str>,
    ) -> Vec<(HeaderName, HeaderValue)> {
        let any_origin = self.origins.iter().any(|o| o == "*");
        let mut out = Vec::with_capacity(6);
        let mut add = |name: HeaderName, value: &str| {
            if let Ok(value) = HeaderValue::from_str(value) {
                out.push((name, value));
            }
        };
        add(
            http::header::ACCESS_CONTROL_ALLOW_ORIGIN,
            if any_origin { "*" } else { origin },
        );
        if !any_origin {
            add(http::header::ACCESS_CONTROL_ALLOW_CREDENTIALS, "true");
        }
        add(
            http::header::ACCESS_CONTROL_ALLOW_METHODS,
            &self.methods.join(", "),
        );
        if let Some(headers) = preflight_headers.filter(|h| !h.trim().is_empty()) {
            add(http::header::ACCESS_CONTROL_ALLOW_HEADERS, headers);
        }
        if !self.expose_headers.is_empty() {
            add(
                http::header::ACCESS_CONTROL_EXPOSE_HEADERS,
                &self.expose_headers.join(", "),
            );
        }
        if let Some(age) = self.max_age {
            add(http::header::ACCESS_CONTROL_MAX_AGE, &age.to_string());
        }
        out
    }
}

/// Fails for a list of more than [`MAX_VALUES`] values or a value longer than [`MAX_VALUE_LEN`] bytes.
fn check_values(what: &str, values: &[String]) -> S3Result<()> {
    if values.len() > MAX_VALUES {
        return Err(s3_error!(
            InvalidRequest,
            "A CORSRule has at most {MAX_VALUES} {what}s, not {}",
            values.len()
        ));
    }
    if values.iter().any(|v| v.len() > MAX_VALUE_LEN) {
        return Err(s3_error!(
            InvalidRequest,
            "An {what} is at most {MAX_VALUE_LEN} bytes"
        ));
    }
    Ok(())
}

/// Whether `text` matches `pattern`, whose one `*` (if any) stands for any run of characters, the empty one
/// too; ignoring ASCII case if `fold`.
fn wildcard_match(pattern: &str, text: &str, fold: bool) -> bool {
    let eq = |a: &str, b: &str| {
        if fold {
            a.eq_ignore_ascii_case(b)
        } else {
            a == b
        }
    };
    let Some((head, tail)) = pattern.split_once('*') else {
        return eq(pattern, text);
    };
    text.len() >= head.len() + tail.len()
        && text.is_char_boundary(head.len())
        && text.is_char_boundary(text.len() - tail.len())
        && eq(&text[..head.len()], head)
        && eq(&text[text.len() - tail.len()..], tail)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(methods: &[&str], origins: &[&str]) -> CORSRule {
        CORSRule {
            allowed_methods: methods.iter().map(|s| (*s).to_owned()).collect(),
            allowed_origins: origins.iter().map(|s| (*s).to_owned()).collect(),
            ..CORSRule::default()
        }
    }

    fn cors(rules: Vec<CORSRule>) -> S3Result<Cors> {
        Cors::from_config(CORSConfiguration { cors_rules: rules }, VersionId(1))
    }

    fn code(r: S3Result<Cors>) -> String {
        r.expect_err("refused").code().as_str().to_owned()
    }

    #[test]
    fn origins_match_with_one_wildcard_anywhere() {
        assert!(wildcard_match("*suffix", "foo.suffix", false));
        assert!(wildcard_match("*suffix", "suffix", false));
        assert!(!wildcard_match("*suffix", "foo.suffix.get", false));
        assert!(wildcard_match("start*end", "startend", false));
        assert!(wildcard_match("start*end", "start12end", false));
        assert!(!wildcard_match("start*end", "0start12end", false));
        // The head and tail may not overlap.
        assert!(!wildcard_match("ab*ba", "aba", false));
        assert!(wildcard_match("prefix*", "prefix.suffix", false));
        assert!(wildcard_match("*", "", false));
        assert!(wildcard_match(
            "https://a.example",
            "https://a.example",
            false
        ));
        assert!(!wildcard_match(
            "https://a.example",
            "https://A.example",
            false
        ));
        assert!(wildcard_match("X-Amz-*", "x-amz-meta-a", true));
        // Multi-byte characters never split.
        assert!(!wildcard_match("é*é", "é", false));
        assert!(wildcard_match("é*", "éa", false));
    }

    #[test]
    fn the_first_rule_matching_origin_method_and_headers_answers() {
        let mut with_headers = rule(&["GET", "PUT"], &["https://app.example"]);
        with_headers.allowed_headers = Some(vec!["content-type".into(), "x-amz-*".into()]);
        let c = cors(vec![
            rule(&["GET"], &["*suffix"]),
            with_headers,
            rule(&["PUT"], &["*"]),
        ])
        .expect("valid");
        assert_eq!(
            c.matching("a.suffix", "GET", &[])
                .map(|r| r.origins[0].as_str()),
            Some("*suffix")
        );
        // A header the first rule does not allow: the next one that does.
        let r = c
            .matching(
                "https://app.example",
                "GET",
                &["Content-Type", "x-amz-date"],
            )
            .expect("the second rule");
        assert_eq!(r.origins, ["https://app.example"]);
        assert!(
            c.matching("https://app.example", "GET", &["authorization"])
                .is_none()
        );
        assert!(c.matching("a.suffix", "DELETE", &[]).is_none());
        assert!(c.matching("anything", "PUT", &[]).is_some());
        // Methods are matched as written (AWS's are upper case only).
        assert!(c.matching("a.suffix", "get", &[]).is_none());
    }

    #[test]
    fn bad_configurations_are_refused_with_aws_codes() {
        assert_eq!(code(cors(vec![])), "MalformedXML");
        assert_eq!(code(cors(vec![rule(&[], &["*"])])), "MalformedXML");
        assert_eq!(code(cors(vec![rule(&["GET"], &[])])), "MalformedXML");
        assert_eq!(code(cors(vec![rule(&["get"], &["*"])])), "InvalidRequest");
        assert_eq!(code(cors(vec![rule(&["PATCH"], &["*"])])), "InvalidRequest");
        assert_eq!(
            code(cors(vec![rule(&["GET"], &["*.a.*"])])),
            "InvalidRequest"
        );
        let mut headers = rule(&["GET"], &["*"]);
        headers.allowed_headers = Some(vec!["x-*-*".into()]);
        assert_eq!(code(cors(vec![headers])), "InvalidRequest");
        let mut expose = rule(&["GET"], &["*"]);
        expose.expose_headers = Some(vec!["bad header".into()]);
        assert_eq!(code(cors(vec![expose])), "InvalidRequest");
        let mut age = rule(&["GET"], &["*"]);
        age.max_age_seconds = Some(-1);
        assert_eq!(code(cors(vec![age])), "InvalidArgument");
        let mut id = rule(&["GET"], &["*"]);
        id.id = Some("i".repeat(256));
        assert_eq!(code(cors(vec![id])), "InvalidArgument");
        assert_eq!(
            code(cors(vec![rule(&["GET"], &["*"]); 101])),
            "InvalidRequest"
        );
        let long = "o".repeat(MAX_VALUE_LEN + 1);
        assert_eq!(code(cors(vec![rule(&["GET"], &[&long])])), "InvalidRequest");
        cors(vec![rule(&["GET"], &["*"]); 100]).expect("100 rules");
    }

    #[test]
    fn configurations_show_back_as_given() {
        let mut full = rule(&["GET", "PUT"], &["https://a.example", "*.b.example"]);
        full.id = Some("web".into());
        full.allowed_headers = Some(vec!["*".into()]);
        full.expose_headers = Some(vec!["ETag".into(), "x-amz-meta-a".into()]);
        full.max_age_seconds = Some(3000);
        let given = vec![full, rule(&["HEAD"], &["*"])];
        let c = cors(given.clone()).expect("valid");
        assert_eq!(c.to_config(), given);
    }

    #[test]
    fn answers_name_the_origin_unless_any_origin_is_allowed() {
        let mut r = rule(&["GET", "PUT"], &["https://a.example"]);
        r.expose_headers = Some(vec!["ETag".into()]);
        r.max_age_seconds = Some(60);
        let c = cors(vec![r, rule(&["GET"], &["*"])]).expect("valid");
        let text = |headers: Vec<(HeaderName, HeaderValue)>| -> Vec<(String, String)> {
            headers
                .into_iter()
                .map(|(n, v)| (n.to_string(), v.to_str().expect("text").to_owned()))
                .collect()
        };
        let named = c.rules[0].response_headers("https://a.example", Some("content-type"));
        assert_eq!(
            text(named),
            [
                ("access-control-allow-origin", "https://a.example"),
                ("access-control-allow-credentials", "true"),
                ("access-control-allow-methods", "GET, PUT"),
                ("access-control-allow-headers", "content-type"),
                ("access-control-expose-headers", "ETag"),
                ("access-control-max-age", "60"),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
        let any = c.rules[1].response_headers("https://other.example", None);
        assert_eq!(
            text(any),
            [
                ("access-control-allow-origin", "*"),
                ("access-control-allow-methods", "GET"),
            ]
            .map(|(n, v)| (n.to_owned(), v.to_owned()))
        );
    }
}
