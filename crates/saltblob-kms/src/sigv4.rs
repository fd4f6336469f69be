//! AWS Signature Version 4 for the KMS JSON API: a `POST /` whose signed headers are `content-type`, `host`,
//! `x-amz-date`, `x-amz-target` and, with temporary credentials, `x-amz-security-token`.

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use aws_lc_rs::{digest, hmac};
use zeroize::Zeroizing;

/// The content type of the KMS JSON API.
pub(crate) const CONTENT_TYPE: &str = "application/x-amz-json-1.1";
/// The service name requests are signed for.
const SERVICE: &str = "kms";

/// Credentials requests are signed with.
#[derive(Clone)]
pub struct Credentials {
    /// The access key id.
    pub access_key_id: String,
    /// The secret access key (never shown).
    pub secret_access_key: Zeroizing<String>,
    /// The session token of temporary credentials.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("session_token", &self.session_token.as_ref().map(|_| "…"))
            .finish_non_exhaustive()
    }
}

impl Credentials {
    /// The credentials of the environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and, if set,
    /// `AWS_SESSION_TOKEN`; `None` when either of the first two is missing or empty.
    pub fn from_env() -> Option<Self> {
        let var = |name| std::env::var(name).ok().filter(|v| !v.is_empty());
        Some(Self {
            access_key_id: var("AWS_ACCESS_KEY_ID")?,
            secret_access_key: Zeroizing::new(var("AWS_SECRET_ACCESS_KEY")?),
            session_token: var("AWS_SESSION_TOKEN"),
        })
    }
}

/// The headers of one signed KMS request, `Authorization` last; `host` is as sent (with its port when it is not
/// the scheme's default).
pub(crate) fn signed_headers(
    credentials: &Credentials,
    region: &str,
    host: &str,
    target: &str,
    body: &[u8],
    amz_date: &str,
) -> Vec<(&'static str, String)> {
    let mut headers = vec![
        ("content-type", CONTENT_TYPE.to_owned()),
        ("host", host.to_owned()),
        ("x-amz-date", amz_date.to_owned()),
    ];
    if let Some(token) = &credentials.session_token {
        headers.push(("x-amz-security-token", token.clone()));
    }
    headers.push(("x-amz-target", target.to_owned()));
    // Canonical order is by name; the list above is built in it.
    let names: Vec<&str> = headers.iter().map(|(n, _)| *n).collect();
    let names = names.join(";");
    let mut canonical = String::from("POST\n/\n\n");
    for (name, value) in &headers {
        let _ = writeln!(canonical, "{name}:{}", value.trim());
    }
    let _ = write!(canonical, "\n{names}\n{}", hex(sha256(body).as_ref()));
    let date = amz_date.get(..8).unwrap_or(amz_date);
    let scope = format!("{date}/{region}/{SERVICE}/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(sha256(canonical.as_bytes()).as_ref())
    );
    let mut key =
        Zeroizing::new(format!("AWS4{}", credentials.secret_access_key.as_str()).into_bytes());
    for part in [date, region, SERVICE, "aws4_request"] {
        key = Zeroizing::new(hmac_sha256(&key, part.as_bytes()));
    }
    let signature = hex(&hmac_sha256(&key, to_sign.as_bytes()));
    headers.push((
        "authorization",
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={names}, Signature={signature}",
            credentials.access_key_id
        ),
    ));
    headers
}

/// `time` as SigV4's `x-amz-date`: `YYYYMMDDTHHMMSSZ`, UTC.
pub(crate) fn amz_date(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn sha256(data: &[u8]) -> digest::Digest {
    digest::digest(&digest::SHA256, data)
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    hmac::sign(&hmac::Key::new(hmac::HMAC_SHA256, key), data)
        .as_ref()
        .to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes
        .iter()
        .fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn credentials(token: Option<&str>) -> Credentials {
        Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: Zeroizing::new("wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY".into()),
            session_token: token.map(str::to_owned),
        }
    }

    fn authorization<'a>(headers: &'a [(&str, String)]) -> &'a str {
        headers
            .iter()
            .find(|(n, _)| *n == "authorization")
            .map(|(_, v)| v.as_str())
            .unwrap_or_default()
    }

    /// The expected values were computed by botocore 1.44.8's `SigV4Auth` (the AWS SDK for Python's signer) for
    /// the same request: POST / with these headers and body.
    #[test]
    fn signatures_match_the_aws_sdks() {
        let body = br#"{"KeyId": "alias/tenant", "KeySpec": "AES_256"}"#;
        let headers = signed_headers(
            &credentials(None),
            "us-east-1",
            "127.0.0.1:5999",
            "TrentService.GenerateDataKey",
            body,
            "20261126T120000Z",
        );
        assert_eq!(
            authorization(&headers),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261126/us-east-1/kms/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date;x-amz-target, \
             Signature=2a943b337a240d603aec3730b0edfeabae6059a8297e8c15f70a239ca11d6b63"
        );
        let headers = signed_headers(
            &credentials(Some("SESSION-SECRET")),
            "eu-west-1",
            "kms.eu-west-1.amazonaws.com",
            "TrentService.Decrypt",
            b"{}",
            "20261126T235959Z",
        );
        assert_eq!(
            authorization(&headers),
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20261126/eu-west-1/kms/aws4_request, \
             SignedHeaders=content-type;host;x-amz-date;x-amz-security-token;x-amz-target, \
             Signature=57ec49de9382749e409f7ee20362de65dd79b7ab52fe6404ad6ec5e75f961221"
        );
    }

    #[test]
    fn dates_are_utc_basic_format() {
        let at = |secs| amz_date(UNIX_EPOCH + Duration::from_secs(secs));
        assert_eq!(at(0), "19700101T000000Z");
        assert_eq!(at(951_782_400), "20000229T000000Z");
        assert_eq!(at(1_795_737_599), "20261126T235959Z");
    }

    #[test]
    fn secrets_are_not_shown() {
        let shown = format!("{:?}", credentials(Some("SESSION-SECRET")));
        assert!(
            !shown.contains("EXAMPLEKEY") && !shown.contains("SESSION-SECRET"),
            "{shown}"
        );
    }
}
