//! Configuration of the cluster backend, from code or from a `cql://` URL.

use std::fmt;
use std::num::NonZeroUsize;
use std::time::Duration;

use saltblob_core::{Error, Result};
use scylla::statement::{Consistency, SerialConsistency};

use crate::tls::TlsOptions;

/// URL scheme of the cluster backend.
pub const SCHEME: &str = "cql";

/// Port used for hosts that name none.
pub const DEFAULT_PORT: u16 = 9042;

/// Keyspace used when the URL names none.
pub const DEFAULT_KEYSPACE: &str = "saltblob";

/// Replication factor of a keyspace created without `rf`: 3, or the number of nodes of the data center if it
/// has fewer.
pub const DEFAULT_RF: u32 = 3;

/// Largest CQL batch budget accepted: Cassandra's default `batch_size_fail_threshold` is 50 KiB, and a batch
/// over it is refused (multi-partition batches) or only tolerated (single-partition ones, which saltblob sends).
pub const MAX_BATCH_BUDGET: usize = 48 << 10;

/// Smallest per-host in-flight budget accepted: it must hold the largest chunk (8 MiB).
pub const MIN_INFLIGHT_PER_HOST: usize = 8 << 20;

/// User name and password for Cassandra's `PasswordAuthenticator`. `Debug` hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The user.
    pub user: String,
    /// The password.
    pub password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<hidden>")
            .finish()
    }
}

/// Configuration of a [`crate::CqlStore`].
///
/// Build it with [`CqlConfig::new`] and the `with_*` setters, or parse a URL with [`CqlConfig::from_url`].
#[derive(Clone, Debug, PartialEq)]
#[must_use]
pub struct CqlConfig {
    /// Contact points, `host:port` each (IPv6 in brackets). At least one.
    pub hosts: Vec<String>,
    /// Keyspace holding saltblob's tables; created if missing. Lowercase CQL identifier
    /// (`[a-z][a-z0-9_]{0,47}`). Defaults to `saltblob`.
    pub keyspace: String,
    /// Replication factor of the keyspace when saltblob creates it (NetworkTopologyStrategy, in
    /// [`CqlConfig::datacenter`]). An existing keyspace keeps its own. Defaults to `None`: 3, or fewer when the
    /// data center has fewer nodes. A value larger than the data center is refused before anything is created.
    pub replication_factor: Option<u32>,
    /// Data center to create the keyspace in and to send requests to. Defaults to `None`: the cluster's only
    /// data center (a cluster with several requires this to be set).
    pub datacenter: Option<String>,
    /// Consistency of reads. Defaults to `LOCAL_QUORUM`.
    pub read_consistency: Consistency,
    /// Consistency of writes. Defaults to `LOCAL_QUORUM`.
    pub write_consistency: Consistency,
    /// Consistency of the Paxos phase of conditional writes (lightweight transactions). Defaults to
    /// `LOCAL_SERIAL`.
    pub serial_consistency: SerialConsistency,
    /// How long to wait for the cluster when connecting. Defaults to 5 s.
    pub connect_timeout: Duration,
    /// Client-side timeout of one request attempt. Longer than Cassandra's own write and read timeouts (2 s and
    /// 5 s) so that the server reports a timeout first. Defaults to 12 s.
    pub request_timeout: Duration,
    /// Connections per host (per shard on ScyllaDB). Defaults to 2.
    pub connections: NonZeroUsize,
    /// Bytes of chunk writes in flight to one host (its primary replica) at once, for each foreground priority
    /// class (`interactive`, and any class with at least its shares) and for writes outside any class (the
    /// scheduler off); further writes wait (backpressure) instead of failing. At least 8 MiB. Defaults to 16 MiB.
    pub inflight_per_host: usize,
    /// The same budget for each background class (`bulk`, and any class with fewer shares than `interactive`):
    /// a budget of its own per host, so background writes never take the room of interactive ones. At least
    /// 8 MiB. Defaults to `None`: [`CqlConfig::inflight_per_host`].
    pub bulk_inflight_per_host: Option<usize>,
    /// Largest CQL batch of chunks of one partition, in bytes; a larger chunk is sent alone. At most 48 KiB.
    /// Defaults to 32 KiB.
    pub batch_bytes: usize,
    /// Attempts of an idempotent request that fails with a transient error (timeout, unavailable, overloaded,
    /// broken connection), with exponential backoff from 50 ms. Defaults to 5.
    pub attempts: u32,
    /// Credentials for `PasswordAuthenticator`. Defaults to none.
    pub credentials: Option<Credentials>,
    /// TLS to the nodes (see [`crate::tls`]). Defaults to none: plain TCP.
    pub tls: Option<TlsOptions>,
    /// The listing index's settings ([`crate::listing`]).
    pub listing: ListingConfig,
}

/// Settings of the listing index ([`crate::listing`]); URL parameters `listing_refresh`, `listing_max_rows` and
/// `listing_split_wait`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListingConfig {
    /// How long a process uses the directory it read before reading it again. Defaults to 10 s.
    pub refresh: Duration,
    /// Rows a range may hold before the maintenance splits it; the planned size of a range is half of it. At least
    /// 2. Defaults to 200 000 (a partition of about 20 to 50 MB with keys of 100 to 250 bytes).
    pub max_rows: u64,
    /// How long a split waits between writing its new ranges and moving rows into them: every process has read
    /// the directory again by then, and a write issued before has landed. At least [`ListingConfig::refresh`].
    /// Defaults to 11 minutes: the refresh and the commit window of `docs/guarantees.md`.
    pub split_wait: Duration,
}

impl Default for ListingConfig {
    fn default() -> Self {
        Self {
            refresh: Duration::from_secs(10),
            max_rows: 200_000,
            split_wait: Duration::from_secs(660),
        }
    }
}

impl CqlConfig {
    /// Defaults for keyspace `keyspace` on the cluster reached through `hosts` (`host` or `host:port`).
    pub fn new(
        hosts: impl IntoIterator<Item = impl Into<String>>,
        keyspace: impl Into<String>,
    ) -> Self {
        Self {
            hosts: hosts.into_iter().map(Into::into).collect(),
            keyspace: keyspace.into(),
            replication_factor: None,
            datacenter: None,
            read_consistency: Consistency::LocalQuorum,
            write_consistency: Consistency::LocalQuorum,
            serial_consistency: SerialConsistency::LocalSerial,
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(12),
            connections: NonZeroUsize::MIN.saturating_add(1),
            inflight_per_host: 16 << 20,
            bulk_inflight_per_host: None,
            batch_bytes: 32 << 10,
            attempts: 5,
            credentials: None,
            tls: None,
            listing: ListingConfig::default(),
        }
    }

    /// Sets [`CqlConfig::replication_factor`].
    pub fn with_replication_factor(mut self, rf: u32) -> Self {
        self.replication_factor = Some(rf);
        self
    }

    /// Sets both [`CqlConfig::read_consistency`] and [`CqlConfig::write_consistency`].
    pub fn with_consistency(mut self, consistency: Consistency) -> Self {
        self.read_consistency = consistency;
        self.write_consistency = consistency;
        self
    }

    /// Sets [`CqlConfig::datacenter`].
    pub fn with_datacenter(mut self, dc: impl Into<String>) -> Self {
        self.datacenter = Some(dc.into());
        self
    }

    /// Sets [`CqlConfig::connect_timeout`].
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Sets [`CqlConfig::request_timeout`].
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Sets [`CqlConfig::inflight_per_host`].
    pub fn with_inflight_per_host(mut self, bytes: usize) -> Self {
        self.inflight_per_host = bytes;
        self
    }

    /// Sets [`CqlConfig::bulk_inflight_per_host`].
    pub fn with_bulk_inflight_per_host(mut self, bytes: usize) -> Self {
        self.bulk_inflight_per_host = Some(bytes);
        self
    }

    /// The per-host budget of each background class: [`CqlConfig::bulk_inflight_per_host`], else
    /// [`CqlConfig::inflight_per_host`].
    pub fn bulk_budget(&self) -> usize {
        self.bulk_inflight_per_host
            .unwrap_or(self.inflight_per_host)
    }

    /// Sets [`CqlConfig::tls`].
    pub fn with_tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Parses `cql://[user:password@]host1[:port],host2[:port]/keyspace?key=value&...`.
    ///
    /// The credentials end at the URL's last `@` (a password may hold any character, `/ ? # @ :` included, raw or
    /// %-encoded; a `%` in it is written `%25`, an `@` after the hosts `%40`), and the user name at the first `:`.
    /// Errors show the URL with the password hidden ([`saltblob_core::redact_url`]) and never quote it.
    ///
    /// A port on the last host applies to every host without one (`cql://a,b:9043/ks` is a:9043 and b:9043);
    /// otherwise 9042. The keyspace defaults to `saltblob`. Options (all optional):
    ///
    /// | key | meaning | default |
    /// |---|---|---|
    /// | `rf` | replication factor when creating the keyspace | 3, capped at the data center's nodes |
    /// | `consistency` | read and write consistency (`one`, `quorum`, `local_quorum`, `all`, ...) | `local_quorum` |
    /// | `read_consistency`, `write_consistency` | one of the two | `consistency` |
    /// | `serial_consistency` | `serial` or `local_serial` (conditional writes) | `local_serial` |
    /// | `dc` | data center | the only one |
    /// | `connect_timeout`, `request_timeout` | `500ms`, `5s`, `2m` (a bare number is seconds) | 5 s, 12 s |
    /// | `connections` | connections per host (per shard on ScyllaDB) | 2 |
    /// | `inflight_per_host` | bytes of chunk writes in flight per host, per foreground class (`16MiB`) | 16 MiB |
    /// | `bulk_inflight_per_host` | the same for each background class (`bulk`) | `inflight_per_host` |
    /// | `batch_bytes` | CQL batch budget (`32KiB`), at most 48 KiB | 32 KiB |
    /// | `attempts` | attempts of idempotent requests on transient errors | 5 |
    /// | `tls` | `true`: connect over TLS (then `ca` is required) | `false` |
    /// | `ca` | PEM file of the CA that signed the nodes' certificates | none |
    /// | `cert`, `key` | PEM files of a client certificate and its private key (both or neither) | none |
    ///
    /// Every problem is an [`Error::InvalidUrl`] that says what is wrong and what is accepted.
    pub fn from_url(url: &str) -> Result<Self> {
        let bad = |reason: String| Error::InvalidUrl {
            url: saltblob_core::redact_url(url),
            reason,
        };
        let rest = url.strip_prefix("cql://").ok_or_else(|| {
            bad(
                "a cluster store URL starts with cql://, e.g. cql://host1,host2:9042/keyspace?rf=3"
                    .into(),
            )
        })?;
        // The user information ends at the last '@', as `redact_url` reads it: a password may hold any
        // character, and no part of it is ever quoted in an error.
        let (credentials, location) = match rest.rsplit_once('@') {
            Some((userinfo, location)) => {
                (Some(parse_credentials(userinfo).map_err(bad)?), location)
            }
            None => (None, rest),
        };
        let (hosts_and_path, query) = location.split_once('?').unwrap_or((location, ""));
        let (hosts_part, path) = hosts_and_path
            .split_once('/')
            .unwrap_or((hosts_and_path, ""));
        let hosts = parse_hosts(hosts_part).map_err(bad)?;
        let keyspace = if path.is_empty() {
            DEFAULT_KEYSPACE.to_owned()
        } else {
            path.to_owned()
        };
        let keyspace = validate_keyspace(&keyspace).map_err(bad)?;
        let mut config = Self::new(hosts, keyspace);
        config.credentials = credentials;
        let mut consistency: Option<Consistency> = None;
        let (mut read, mut write) = (None, None);
        let (mut tls, mut ca, mut cert, mut key) = (None, None, None, None);
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| bad(format!("\"{pair}\" is not key=value")))?;
            match k {
                "rf" | "replication_factor" => {
                    let rf = v.parse::<u32>().ok().filter(|rf| *rf >= 1).ok_or_else(|| {
                        bad(format!(
                            "rf={v}: the replication factor is a whole number, at least 1"
                        ))
                    })?;
                    config.replication_factor = Some(rf);
                }
                "consistency" => {
                    consistency = Some(
                        parse_consistency(v).map_err(|r| bad(format!("consistency={v}: {r}")))?,
                    )
                }
                "read_consistency" => {
                    read = Some(parse_consistency(v).map_err(|r| bad(format!("{k}={v}: {r}")))?)
                }
                "write_consistency" => {
                    write = Some(parse_consistency(v).map_err(|r| bad(format!("{k}={v}: {r}")))?)
                }
                "serial_consistency" => {
                    config.serial_consistency = match v.to_ascii_lowercase().as_str() {
                        "serial" => SerialConsistency::Serial,
                        "local_serial" => SerialConsistency::LocalSerial,
                        _ => {
                            return Err(bad(format!(
                                "serial_consistency={v}: use serial or local_serial"
                            )));
                        }
                    }
                }
                "dc" | "datacenter" => {
                    if v.is_empty() {
                        return Err(bad(
                            "dc is empty; name a data center, e.g. dc=datacenter1".into()
                        ));
                    }
                    config.datacenter = Some(
                        percent_decode(v).ok_or_else(|| bad(format!("dc={v}: bad %-escape")))?,
                    );
                }
                "connect_timeout" => {
                    config.connect_timeout =
                        parse_timeout(v).map_err(|r| bad(format!("{k}={v}: {r}")))?
                }
                "request_timeout" => {
                    config.request_timeout =
                        parse_timeout(v).map_err(|r| bad(format!("{k}={v}: {r}")))?
                }
                "connections" => {
                    config.connections = v
                        .parse::<usize>()
                        .ok()
                        .filter(|n| (1..=64).contains(n))
                        .and_then(NonZeroUsize::new)
                        .ok_or_else(|| {
                            bad(format!("connections={v}: use a whole number from 1 to 64"))
                        })?;
                }
                "inflight_per_host" => {
                    config.inflight_per_host =
                        parse_budget(v).map_err(|r| bad(format!("{k}={v}: {r}")))?
                }
                "bulk_inflight_per_host" => {
                    config.bulk_inflight_per_host =
                        Some(parse_budget(v).map_err(|r| bad(format!("{k}={v}: {r}")))?)
                }
                "batch_bytes" => {
                    let n = parse_size(v).map_err(|r| bad(format!("{k}={v}: {r}")))?;
                    if n == 0 || n > MAX_BATCH_BUDGET {
                        return Err(bad(format!(
                            "{k}={v}: from 1 byte to 48KiB, below Cassandra's batch_size_fail_threshold (50KiB by default)"
                        )));
                    }
                    config.batch_bytes = n;
                }
                "attempts" => {
                    config.attempts = v
                        .parse::<u32>()
                        .ok()
                        .filter(|n| (1..=20).contains(n))
                        .ok_or_else(|| {
                            bad(format!("attempts={v}: use a whole number from 1 to 20"))
                        })?;
                }
                "listing_refresh" => {
                    config.listing.refresh =
                        parse_timeout(v).map_err(|r| bad(format!("{k}={v}: {r}")))?
                }
                "listing_split_wait" => {
                    config.listing.split_wait = saltblob_core::parse_duration(v)
                        .map_err(|r| bad(format!("{k}={v}: {r}")))?
                }
                "listing_max_rows" => {
                    config.listing.max_rows = v
                        .parse::<u64>()
                        .ok()
                        .filter(|n| *n >= 2)
                        .ok_or_else(|| bad(format!("{k}={v}: a whole number, at least 2")))?
                }
                "tls" => tls = Some(v),
                "ca" | "cert" | "key" => {
                    let path =
                        percent_decode(v).ok_or_else(|| bad(format!("{k}={v}: bad %-escape")))?;
                    match k {
                        "ca" => ca = Some(path),
                        "cert" => cert = Some(path),
                        _ => key = Some(path),
                    }
                }
                _ => {
                    return Err(bad(format!(
                        "unknown option \"{k}\"; accepted: rf, consistency, read_consistency, write_consistency, \
                         serial_consistency, dc, connect_timeout, request_timeout, connections, inflight_per_host, \
                         bulk_inflight_per_host, batch_bytes, attempts, listing_refresh, listing_max_rows, \
                         listing_split_wait, tls, ca, cert, key"
                    )));
                }
            }
        }
        config.read_consistency = read.or(consistency).unwrap_or(config.read_consistency);
        config.write_consistency = write.or(consistency).unwrap_or(config.write_consistency);
        config.tls = TlsOptions::from_url_options(tls, ca, cert, key).map_err(bad)?;
        Ok(config)
    }

    /// Checks the configuration built in code (URLs are checked as they are parsed).
    pub fn validate(&self) -> Result<()> {
        if self.hosts.is_empty() {
            return Err(Error::invalid(
                "hosts",
                "no contact point; give at least one host",
            ));
        }
        validate_keyspace(&self.keyspace).map_err(|r| Error::invalid("keyspace", r))?;
        if self.replication_factor == Some(0) {
            return Err(Error::invalid(
                "replication factor",
                "0; it must be at least 1",
            ));
        }
        for (name, budget) in [
            ("inflight_per_host", Some(self.inflight_per_host)),
            ("bulk_inflight_per_host", self.bulk_inflight_per_host),
        ] {
            if budget.is_some_and(|b| b < MIN_INFLIGHT_PER_HOST) {
                return Err(Error::invalid(
                    name,
                    "below 8 MiB; it must hold the largest chunk",
                ));
            }
        }
        if self.listing.max_rows < 2 {
            return Err(Error::invalid("listing_max_rows", "below 2"));
        }
        if self.listing.split_wait < self.listing.refresh {
            return Err(Error::invalid(
                "listing_split_wait",
                format!(
                    "{:?} is shorter than listing_refresh ({:?}): a split must wait until every process read the \
                     directory again",
                    self.listing.split_wait, self.listing.refresh
                ),
            ));
        }
        if self.batch_bytes == 0 || self.batch_bytes > MAX_BATCH_BUDGET {
            return Err(Error::invalid(
                "batch_bytes",
                "out of range; use 1 byte to 48 KiB",
            ));
        }
        if self.attempts == 0 {
            return Err(Error::invalid(
                "attempts",
                "0; at least one attempt is needed",
            ));
        }
        for c in [self.read_consistency, self.write_consistency] {
            if matches!(c, Consistency::Serial | Consistency::LocalSerial) {
                return Err(Error::invalid(
                    "consistency",
                    "SERIAL levels are for conditional writes only",
                ));
            }
        }
        if self.read_consistency == Consistency::Any {
            return Err(Error::invalid("read consistency", "ANY is for writes only"));
        }
        Ok(())
    }
}

/// Checks a keyspace name against CQL's rules for unquoted identifiers and lowercases it (as CQL does).
pub fn validate_keyspace(name: &str) -> std::result::Result<String, String> {
    let mut chars = name.chars();
    let ok = matches!(chars.next(), Some(c) if c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && name.len() <= 48;
    if ok {
        Ok(name.to_ascii_lowercase())
    } else {
        Err(format!(
            "keyspace \"{name}\" is not a valid CQL name: a letter, then up to 47 letters, digits or underscores"
        ))
    }
}

fn parse_hosts(s: &str) -> std::result::Result<Vec<String>, String> {
    if s.is_empty() {
        return Err("no host; e.g. cql://127.0.0.1:9042/keyspace".into());
    }
    let mut parsed: Vec<(String, Option<u16>)> = Vec::new();
    for h in s.split(',') {
        if h.is_empty() {
            return Err("an empty host in the host list".into());
        }
        let (host, port) = if let Some(rest) = h.strip_prefix('[') {
            let (ip, after) = rest
                .split_once(']')
                .ok_or_else(|| format!("host \"{h}\": missing ]"))?;
            let port = match after {
                "" => None,
                p => Some(
                    p.strip_prefix(':')
                        .ok_or_else(|| format!("host \"{h}\": expected :port after ]"))?,
                ),
            };
            (format!("[{ip}]"), port)
        } else {
            match h.rsplit_once(':') {
                Some((host, port)) => (host.to_owned(), Some(port)),
                None => (h.to_owned(), None),
            }
        };
        if host.is_empty() || host.contains(['/', '@', ' ', ':']) && !host.starts_with('[') {
            return Err(format!("host \"{h}\" is not a host name or address"));
        }
        let port = port
            .map(|p| {
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| format!("host \"{h}\": port \"{p}\" is not 1 to 65535"))
            })
            .transpose()?;
        parsed.push((host, port));
    }
    let shared = parsed.last().and_then(|(_, p)| *p).unwrap_or(DEFAULT_PORT);
    Ok(parsed
        .into_iter()
        .map(|(h, p)| format!("{h}:{}", p.unwrap_or(shared)))
        .collect())
}

/// Parses a CQL consistency level (case-insensitive; SERIAL levels are not accepted here).
pub fn parse_consistency(s: &str) -> std::result::Result<Consistency, String> {
    Ok(match s.to_ascii_lowercase().as_str() {
        "any" => Consistency::Any,
        "one" => Consistency::One,
        "two" => Consistency::Two,
        "three" => Consistency::Three,
        "quorum" => Consistency::Quorum,
        "all" => Consistency::All,
        "local_quorum" => Consistency::LocalQuorum,
        "each_quorum" => Consistency::EachQuorum,
        "local_one" => Consistency::LocalOne,
        "serial" | "local_serial" => {
            return Err(
                "SERIAL levels apply to conditional writes only; use serial_consistency".into(),
            );
        }
        _ => {
            return Err(
                "use one of any, one, two, three, quorum, all, local_quorum, each_quorum, local_one".into()
            );
        }
    })
}

/// Parses a timeout ([`saltblob_core::parse_duration`]: `500ms`, `5s`, `2m`, a number alone is seconds) from 1 ms
/// to 1 h.
fn parse_timeout(s: &str) -> std::result::Result<Duration, String> {
    let d = saltblob_core::parse_duration(s)?;
    if !(Duration::from_millis(1)..=Duration::from_secs(3600)).contains(&d) {
        return Err(
            "out of range; use a duration from 1ms to 1h, a number with a unit such as 500ms, 5s or 2m".into(),
        );
    }
    Ok(d)
}

/// Parses a per-host in-flight budget: a size of at least [`MIN_INFLIGHT_PER_HOST`].
fn parse_budget(s: &str) -> std::result::Result<usize, String> {
    let n = parse_size(s)?;
    if n < MIN_INFLIGHT_PER_HOST {
        return Err("at least 8MiB, so that the largest chunk fits".into());
    }
    Ok(n)
}

fn parse_size(s: &str) -> std::result::Result<usize, String> {
    let n = saltblob_core::parse_size(s)?;
    usize::try_from(n).map_err(|_| format!("\"{s}\" is too large"))
}

/// `%XX`-decodes `s` into UTF-8 text; `None` for a bad escape or bytes that are not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    String::from_utf8(saltblob_core::unescape_key(s).ok()?).ok()
}

/// The credentials of `user:password` (each %-decoded). The user name ends at the first ':'; the password is the
/// rest, and may hold any character. Errors never quote either.
fn parse_credentials(userinfo: &str) -> std::result::Result<Credentials, String> {
    let (user, password) = userinfo.split_once(':').ok_or_else(|| {
        "credentials must be user:password@ before the hosts (everything before the URL's last '@' is read as \
         credentials: write an '@' elsewhere as %40)"
            .to_owned()
    })?;
    if user.is_empty() {
        return Err("the user name before ':' in user:password@ is empty".into());
    }
    let decode = |s: &str| {
        percent_decode(s).ok_or_else(|| {
            "a '%' in user:password@ is not followed by two hex digits (write a '%' as %25) or the decoded \
             credentials are not UTF-8"
                .to_owned()
        })
    };
    Ok(Credentials {
        user: decode(user)?,
        password: decode(password)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(url: &str) -> String {
        match CqlConfig::from_url(url) {
            Err(e @ Error::InvalidUrl { .. }) => e.to_string(),
            other => panic!("{url}: expected InvalidUrl, got {other:?}"),
        }
    }

    #[test]
    fn defaults() {
        let c = CqlConfig::from_url("cql://127.0.0.1").expect("parses");
        assert_eq!(c, CqlConfig::new(["127.0.0.1:9042"], "saltblob"));
        assert_eq!(c.read_consistency, Consistency::LocalQuorum);
        assert_eq!(c.write_consistency, Consistency::LocalQuorum);
        assert_eq!(c.serial_consistency, SerialConsistency::LocalSerial);
        assert_eq!(c.replication_factor, None);
        assert_eq!(
            (c.batch_bytes, c.inflight_per_host, c.connections.get()),
            (32 << 10, 16 << 20, 2)
        );
        assert!(c.validate().is_ok());
    }

    #[test]
    fn hosts_ports_keyspace_and_options() {
        let c = CqlConfig::from_url("cql://host1,host2:9043/My_Ks1?rf=3&consistency=QUORUM")
            .expect("parses");
        assert_eq!(c.hosts, ["host1:9043", "host2:9043"]);
        assert_eq!(c.keyspace, "my_ks1");
        assert_eq!(c.replication_factor, Some(3));
        assert_eq!(
            (c.read_consistency, c.write_consistency),
            (Consistency::Quorum, Consistency::Quorum)
        );

        let c = CqlConfig::from_url("cql://a:1,b,[::1]:7000/ks").expect("parses");
        assert_eq!(c.hosts, ["a:1", "b:7000", "[::1]:7000"]);
        let c = CqlConfig::from_url("cql://[::1]/ks").expect("parses");
        assert_eq!(c.hosts, ["[::1]:9042"]);

        let c = CqlConfig::from_url(
            "cql://u:p%40ss@h/ks?dc=dc1&read_consistency=one&consistency=all&serial_consistency=serial\
             &connect_timeout=500ms&request_timeout=3&connections=4&inflight_per_host=32MiB&batch_bytes=16KiB&attempts=2",
        )
        .expect("parses");
        assert_eq!(
            c.credentials,
            Some(Credentials {
                user: "u".into(),
                password: "p@ss".into()
            })
        );
        assert_eq!(c.datacenter.as_deref(), Some("dc1"));
        assert_eq!(
            (c.read_consistency, c.write_consistency),
            (Consistency::One, Consistency::All)
        );
        assert_eq!(c.serial_consistency, SerialConsistency::Serial);
        assert_eq!(
            (c.connect_timeout, c.request_timeout),
            (Duration::from_millis(500), Duration::from_secs(3))
        );
        assert_eq!(
            (
                c.connections.get(),
                c.inflight_per_host,
                c.batch_bytes,
                c.attempts
            ),
            (4, 32 << 20, 16 << 10, 2)
        );
        assert!(
            !format!("{c:?}").contains("p@ss"),
            "Debug hides the password"
        );
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        for (url, needle) in [
            ("rocksdb:///x", "starts with cql://"),
            ("cql://", "no host"),
            ("cql:///ks", "no host"),
            ("cql://h,,i/ks", "empty host"),
            ("cql://h:0/ks", "port"),
            ("cql://h:99999/ks", "port"),
            ("cql://h:x/ks", "port"),
            ("cql://h/1ks", "not a valid CQL name"),
            ("cql://h/ks-dash", "not a valid CQL name"),
            ("cql://h/ks/more", "not a valid CQL name"),
            (
                "cql://h/abcdefghijabcdefghijabcdefghijabcdefghijabcdefghij",
                "not a valid CQL name",
            ),
            ("cql://h/ks?rf=0", "at least 1"),
            ("cql://h/ks?rf=three", "at least 1"),
            ("cql://h/ks?consistency=most", "local_quorum"),
            ("cql://h/ks?consistency=serial", "serial_consistency"),
            ("cql://h/ks?serial_consistency=one", "local_serial"),
            ("cql://h/ks?connect_timeout=soon", "duration"),
            ("cql://h/ks?request_timeout=5h", "unit"),
            ("cql://h/ks?batch_bytes=64KiB", "batch_size_fail_threshold"),
            (
                "cql://h/ks?inflight_per_host=1MiB",
                "inflight_per_host=1MiB: at least 8MiB",
            ),
            (
                "cql://h/ks?bulk_inflight_per_host=8MiB-1",
                "bulk_inflight_per_host=8MiB-1:",
            ),
            (
                "cql://h/ks?bulk_inflight_per_host=4MiB",
                "bulk_inflight_per_host=4MiB: at least 8MiB",
            ),
            (
                "cql://h/ks?bulk_inflight_per_host=",
                "bulk_inflight_per_host=:",
            ),
            ("cql://h/ks?connections=0", "1 to 64"),
            ("cql://h/ks?dc=", "data center"),
            ("cql://h/ks?nope=1", "unknown option \"nope\""),
            ("cql://h/ks?rf", "not key=value"),
            ("cql://@h/ks", "user:password"),
        ] {
            let e = err(url);
            assert!(e.starts_with("invalid store URL"), "{url}: {e}");
            assert!(e.contains(needle), "{url}: {e:?} should mention {needle:?}");
        }
        for (url, needle) in [
            ("cql://h/ks?tls=on", "tls=on: use true or false"),
            ("cql://h/ks?tls=true", "tls=true needs ca=FILE"),
            ("cql://h/ks?ca=/x.pem", "add tls=true"),
            (
                "cql://h/ks?tls=true&ca=/x.pem&cert=/c.pem",
                "needs key=FILE",
            ),
            ("cql://h/ks?tls=true&ca=%zz", "ca=%zz: bad %-escape"),
        ] {
            let e = err(url);
            assert!(e.contains(needle), "{url}: {e:?} should mention {needle:?}");
        }
        let e = err("cql://user:secret@h/ks?nope=1");
        assert!(
            !e.contains("secret") && e.contains("user:***@h"),
            "password redacted: {e}"
        );
    }

    #[test]
    fn tls_options() {
        let c = CqlConfig::from_url("cql://h/ks?tls=true&ca=/etc/ca%20dir/ca.pem").expect("parses");
        assert_eq!(c.tls, Some(TlsOptions::new("/etc/ca dir/ca.pem")));
        let c = CqlConfig::from_url("cql://h/ks?tls=true&ca=ca.pem&cert=c.pem&key=c.key")
            .expect("parses");
        assert_eq!(
            c.tls,
            Some(TlsOptions::new("ca.pem").with_client_certificate("c.pem", "c.key"))
        );
        assert_eq!(
            CqlConfig::from_url("cql://h/ks?tls=false")
                .expect("parses")
                .tls,
            None
        );
    }

    #[test]
    fn passwords_may_hold_any_character_and_are_never_shown() {
        for (userinfo, password) in [
            ("u:s3cret", "s3cret"),
            ("u:pa/ss", "pa/ss"),
            ("u:p?a#s", "p?a#s"),
            ("u:p@ss:w0rd", "p@ss:w0rd"),
            ("u:p%2Fss%40x%25", "p/ss@x%"),
        ] {
            let c = CqlConfig::from_url(&format!("cql://{userinfo}@h1,h2:9043/ks?rf=1"))
                .unwrap_or_else(|e| panic!("{userinfo}: {e}"));
            assert_eq!(
                c.credentials,
                Some(Credentials {
                    user: "u".into(),
                    password: password.into()
                })
            );
            assert_eq!((c.hosts.len(), c.keyspace.as_str()), (2, "ks"));
            let secret = userinfo.trim_start_matches("u:");
            for bad in ["h/ks?nope=1", "h:0/ks", "h/1ks", "/ks"] {
                let e = err(&format!("cql://{userinfo}@{bad}"));
                assert!(
                    !e.contains(secret) && !e.contains(password) && e.contains("u:***@"),
                    "{e}"
                );
            }
        }
        let e = err("cql://u:50%off@h/ks");
        assert!(e.contains("%25") && !e.contains("50%off"), "{e}");
    }

    #[test]
    fn keyspace_rules() {
        assert_eq!(validate_keyspace("a").as_deref(), Ok("a"));
        assert_eq!(validate_keyspace("Saltblob_2").as_deref(), Ok("saltblob_2"));
        assert!(validate_keyspace(&"k".repeat(48)).is_ok());
        for bad in ["", "_a", "9a", "a-b", "a b", "ä", &"k".repeat(49)] {
            assert!(validate_keyspace(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn code_built_configs_are_validated() {
        assert!(
            CqlConfig::new(Vec::<String>::new(), "ks")
                .validate()
                .is_err()
        );
        assert!(CqlConfig::new(["h:9042"], "bad-name").validate().is_err());
        assert!(
            CqlConfig::new(["h:9042"], "ks")
                .with_replication_factor(0)
                .validate()
                .is_err()
        );
        assert!(
            CqlConfig::new(["h:9042"], "ks")
                .with_consistency(Consistency::Serial)
                .validate()
                .is_err()
        );
        assert!(
            CqlConfig::new(["h:9042"], "ks")
                .with_inflight_per_host(1 << 20)
                .validate()
                .is_err()
        );
        let e = CqlConfig::new(["h:9042"], "ks")
            .with_bulk_inflight_per_host((8 << 20) - 1)
            .validate()
            .expect_err("a bulk budget below the largest chunk");
        assert!(e.to_string().contains("bulk_inflight_per_host"), "{e}");
    }

    #[test]
    fn bulk_budget_defaults_to_the_interactive_one() {
        let c = CqlConfig::from_url("cql://h/ks?inflight_per_host=32MiB").expect("parses");
        assert_eq!(
            (c.bulk_inflight_per_host, c.bulk_budget()),
            (None, 32 << 20)
        );
        let c =
            CqlConfig::from_url("cql://h/ks?bulk_inflight_per_host=8MiB&inflight_per_host=64MiB")
                .expect("parses");
        assert_eq!(
            (
                c.inflight_per_host,
                c.bulk_inflight_per_host,
                c.bulk_budget()
            ),
            (64 << 20, Some(8 << 20), 8 << 20)
        );
        assert!(c.validate().is_ok());
    }
}
