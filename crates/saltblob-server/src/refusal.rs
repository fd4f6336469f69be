//! A request refused before s3s sees it (by `guard.rs`, by the request handler when it sheds load, by a request
//! body that fails: `chunked.rs`, `handler.rs`), answered with S3's error document.

use http::StatusCode;

/// One refused request: the S3 error code, its HTTP status and message, and the header (or query parameter)
/// that caused it, when one did (AWS names it in the `<Header>` element of a `NotImplemented` error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub code: &'static str,
    pub status: StatusCode,
    pub message: String,
    pub header: Option<String>,
}

impl Refusal {
    pub(crate) fn new(code: &'static str, status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            code,
            status,
            message: message.into(),
            header: None,
        }
    }

    /// The refusal, naming the header (or query parameter) that caused it.
    pub(crate) fn naming(mut self, header: &str) -> Self {
        self.header = Some(header.to_owned());
        self
    }

    /// The error document, with `request_id` as its RequestId.
    pub(crate) fn xml(&self, request_id: &str) -> String {
        let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error>");
        for (tag, value) in [
            ("Code", Some(self.code)),
            ("Message", Some(self.message.as_str())),
            ("Header", self.header.as_deref()),
            ("RequestId", Some(request_id)),
        ] {
            if let Some(value) = value {
                out.push_str(&format!("<{tag}>{}</{tag}>", xml_escape(value)));
            }
        }
        out.push_str("</Error>");
        out
    }
}

/// `text` with XML's special characters escaped.
pub(crate) fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}
