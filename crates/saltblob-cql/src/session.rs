//! The session to the cluster and its bootstrap: connecting, choosing the data center, creating the schema
//! (through [`crate::schema`]), preparing the statements and checking the schema format marker; then running
//! every request with retries ([`Cluster::run`]) and explaining its failures ([`Cluster::context`]).

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use saltblob_core::backend::{Namespace, deadline};
use saltblob_core::{Backoff, Error, Jitter, KeyDisplay, Result};
use scylla::client::PoolSize;
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::errors::ExecutionError;
use scylla::policies::load_balancing::DefaultPolicy;
use scylla::response::query_result::QueryResult;
use scylla::statement::Consistency;

use crate::config::{CqlConfig, validate_keyspace};
use crate::directory::{DirectoryCache, PendingCounts};
use crate::error::{self, Context, NAME};
use crate::schema::{self, MARKER_KEY, MARKER_NS, SCHEMA_FORMAT, SCHEMA_FORMAT_1, SCHEMA_FORMAT_2};
use crate::statements::{Statements, V, key_values};
use crate::tls;

/// How a request that failed with a transient error is tried again (idempotent ones only): waits of up to 50 ms
/// before the second attempt, twice as long before each later one, at most 2 s, each drawn at random from zero to
/// that (full jitter); the attempts are the configuration's ([`CqlConfig::attempts`], default 5).
pub(crate) const REQUEST_RETRY: Backoff = Backoff::new(5, Duration::from_millis(50))
    .growing(2)
    .capped(Duration::from_secs(2))
    .with_jitter(Jitter::Full);

/// A session to the cluster, bootstrapped: the data center chosen, the schema created and checked, the
/// statements prepared.
pub(crate) struct Cluster {
    /// The driver session.
    pub(crate) session: Session,
    /// The configuration, with its keyspace name validated.
    pub(crate) config: CqlConfig,
    /// The data center requests go to.
    pub(crate) datacenter: String,
    /// The prepared statements.
    pub(crate) st: Statements,
    /// The listing index's directory as last read ([`crate::listing`]).
    pub(crate) directory: DirectoryCache,
    /// Index rows this process wrote and deleted per range, not yet added to the ranges' counters.
    pub(crate) counts: std::sync::Mutex<PendingCounts>,
    /// Reads of the listing index's range partitions so far.
    pub(crate) index_reads: std::sync::atomic::AtomicU64,
    /// Manifests read by listings so far (one per key an index read named).
    pub(crate) listed_records: std::sync::atomic::AtomicU64,
}

/// What the session's bootstrap accepts of the keyspace's schema format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Formats {
    /// This build's format only (a store).
    Current,
    /// This build's, or an earlier one to upgrade ([`crate::CqlStore::upgrade`]).
    Upgradable,
}

impl Cluster {
    /// Connects to the cluster, creates the keyspace and tables if missing (waiting for schema agreement),
    /// prepares the statements and checks the schema format (see [`crate::CqlStore::connect`]).
    pub(crate) async fn connect(config: CqlConfig) -> Result<Self> {
        Self::connect_to(config, Formats::Current)
            .await
            .map(|(c, _)| c)
    }

    /// [`Cluster::connect`], accepting the schema formats `formats` says; returns the format found.
    pub(crate) async fn connect_to(config: CqlConfig, formats: Formats) -> Result<(Self, u8)> {
        let mut config = config;
        config.validate()?;
        config.keyspace =
            validate_keyspace(&config.keyspace).map_err(|r| Error::invalid("keyspace", r))?;
        let session = Self::open_session(&config).await?;
        let datacenter = Self::pick_datacenter(&session, &config)?;
        // Requests go to replicas in the chosen data center first (token-aware).
        let policy = DefaultPolicy::builder()
            .prefer_datacenter(datacenter.clone())
            .token_aware(true)
            .build();
        let profile = session
            .get_default_execution_profile_handle()
            .pointee_to_builder()
            .load_balancing_policy(policy)
            .build();
        session
            .get_default_execution_profile_handle()
            .clone()
            .map_to_another_profile(profile);

        let nodes = Self::dc_nodes(&session, &datacenter);
        schema::ensure(&session, &config, &datacenter, nodes).await?;
        let st = Statements::prepare(&session, &config).await?;
        let cluster = Self {
            session,
            config,
            datacenter,
            st,
            directory: DirectoryCache::new(),
            counts: std::sync::Mutex::new(PendingCounts::new()),
            index_reads: std::sync::atomic::AtomicU64::new(0),
            listed_records: std::sync::atomic::AtomicU64::new(0),
        };
        let format = cluster.check_format(formats).await?;
        Ok((cluster, format))
    }

    /// A plain driver session to the cluster of `config`, without touching any keyspace (for tools such as
    /// [`crate::import`]). Fails with a clear error when no host answers within the connect timeout.
    pub(crate) async fn open_session(config: &CqlConfig) -> Result<Session> {
        let profile = ExecutionProfile::builder()
            .request_timeout(Some(config.request_timeout))
            // Only schema queries use the profile's consistency (every saltblob statement sets its own):
            // system tables are local, so ONE.
            .consistency(Consistency::One)
            .serial_consistency(Some(config.serial_consistency))
            .build();
        let mut builder = SessionBuilder::new()
            .known_nodes(&config.hosts)
            .connection_timeout(config.connect_timeout)
            .pool_size(PoolSize::PerShard(config.connections))
            .default_execution_profile_handle(profile.into_handle())
            .keyspaces_to_fetch([config.keyspace.clone()])
            .schema_agreement_timeout(Duration::from_secs(60))
            .tcp_nodelay(true);
        if let Some(c) = &config.credentials {
            builder = builder.user(c.user.clone(), c.password.clone());
        }
        let tls = match &config.tls {
            Some(options) => {
                let client_config = tls::client_config(options)?;
                builder = builder.tls_context(Some(client_config.clone()));
                Some((options, client_config))
            }
            None => None,
        };
        // The driver bounds each connection attempt; this bounds the whole handshake and metadata fetch.
        let deadline = config.connect_timeout + Duration::from_secs(2);
        match tokio::time::timeout(deadline, builder.build()).await {
            Ok(Ok(session)) => Ok(session),
            Ok(Err(e)) => {
                // The driver's error says little about a failed TLS handshake: find out why with one of our own.
                if let Some((options, client_config)) = tls {
                    let why = tls::explain_failure(
                        &config.hosts,
                        client_config,
                        options,
                        config.connect_timeout,
                    )
                    .await;
                    if let Some(why) = why {
                        let message = format!(
                            "cannot connect to the cluster at {} over TLS: {why}",
                            config.hosts.join(",")
                        );
                        return Err(Error::backend_caused(NAME, message, false, e));
                    }
                }
                Err(error::connect(&config.hosts, config.connect_timeout, e))
            }
            Err(_) => Err(Error::backend(
                NAME,
                format!(
                    "cannot connect to the cluster at {}: no answer within {:?} (check the hosts and that CQL is \
                     reachable there; raise connect_timeout for a slow network)",
                    config.hosts.join(","),
                    deadline
                ),
                true,
            )),
        }
    }

    /// The data center of `config`, or the cluster's only one; an unknown or ambiguous one is refused.
    fn pick_datacenter(session: &Session, config: &CqlConfig) -> Result<String> {
        let state = session.get_cluster_state();
        let mut dcs: Vec<String> = state
            .get_nodes_info()
            .iter()
            .filter_map(|n| n.datacenter.clone())
            .collect();
        dcs.sort();
        dcs.dedup();
        match (&config.datacenter, dcs.as_slice()) {
            (Some(dc), _) if dcs.contains(dc) => Ok(dc.clone()),
            (Some(dc), known) => Err(Error::invalid(
                "data center",
                format!(
                    "\"{dc}\" is not a data center of this cluster; it has: {}",
                    known.join(", ")
                ),
            )),
            (None, [only]) => Ok(only.clone()),
            (None, []) => Err(Error::backend(
                NAME,
                "the cluster reports no data center for its nodes; set dc= in the URL",
                false,
            )),
            (None, several) => Err(Error::invalid(
                "data center",
                format!(
                    "the cluster has several data centers ({}); choose one with dc= in the URL",
                    several.join(", ")
                ),
            )),
        }
    }

    /// The number of nodes of data center `dc` known to the driver.
    fn dc_nodes(session: &Session, dc: &str) -> usize {
        session
            .get_cluster_state()
            .get_nodes_info()
            .iter()
            .filter(|n| n.datacenter.as_deref() == Some(dc))
            .count()
    }

    /// Reads the schema format marker; on a new keyspace writes it.
    /// Refuses a keyspace of another format than `formats` accepts; returns the one found.
    async fn check_format(&self, formats: Formats) -> Result<u8> {
        let key = vec![V::Tiny(MARKER_NS), V::Blob(Bytes::from_static(MARKER_KEY))];
        let what = || {
            format!(
                "reading the schema format marker of keyspace {}",
                self.config.keyspace
            )
        };
        let result = self
            .run(what, true, || {
                self.session.execute_unpaged(&self.st.records.get, &key)
            })
            .await?;
        let ks = &self.config.keyspace;
        match first_value(result, "the schema format marker")?.as_deref() {
            None => {
                self.write_format(SCHEMA_FORMAT).await?;
                Ok(SCHEMA_FORMAT)
            }
            Some([SCHEMA_FORMAT]) => Ok(SCHEMA_FORMAT),
            Some([old @ (SCHEMA_FORMAT_1 | SCHEMA_FORMAT_2)]) if formats == Formats::Upgradable => {
                Ok(*old)
            }
            Some([SCHEMA_FORMAT_1]) => Err(Error::invalid(
                "keyspace",
                format!(
                    "keyspace {ks} was written by an earlier saltblob (schema format {SCHEMA_FORMAT_1}, without the \
                     listing index); this build reads format {SCHEMA_FORMAT}: run `saltblob --store <URL> upgrade` once, with \
                     the store's writers stopped, to build its index (nothing else changes)"
                ),
            )),
            Some([SCHEMA_FORMAT_2]) => Err(Error::invalid(
                "keyspace",
                format!(
                    "keyspace {ks} was written by an earlier saltblob (schema format {SCHEMA_FORMAT_2}, intents and the \
                     reclaim queue in one partition each); this build reads format {SCHEMA_FORMAT}: run \
                     `saltblob --store <URL> upgrade` once, with the store's writers of the earlier build stopped (it \
                     takes a moment: nothing is copied; what they queued is drained where it is)"
                ),
            )),
            Some(v) => Err(Error::corrupt(
                format!("keyspace {ks}"),
                format!(
                    "schema format marker is {v:?}; this build reads format [{SCHEMA_FORMAT}] (is it from a newer saltblob?)"
                ),
            )),
        }
    }

    /// Writes the schema format marker: `format`, with a timestamp of `format` (a format's marker replaces an older
    /// one's, whatever the clocks).
    pub(crate) async fn write_format(&self, format: u8) -> Result<()> {
        let mut row = vec![V::Tiny(MARKER_NS), V::Blob(Bytes::from_static(MARKER_KEY))];
        row.extend([
            V::Blob(Bytes::copy_from_slice(&[format])),
            V::Big(i64::from(format)),
        ]);
        // At ONE: the marker is the same wherever it is written, and a reader that misses it writes it again. A
        // keyspace whose replicas cannot meet the configured consistency fails on its first real write, with an
        // explanation, rather than here.
        let mut put = self.st.records.put.clone();
        put.set_consistency(Consistency::One);
        let what = || "writing the schema format marker".to_owned();
        self.run(what, true, || self.session.execute_unpaged(&put, &row))
            .await
            .map(drop)
    }

    /// What error messages need to explain unavailable replicas.
    pub(crate) fn context(&self) -> Context {
        let state = self.session.get_cluster_state();
        let replication_factor =
            state
                .get_keyspace(&self.config.keyspace)
                .and_then(|k| match &k.strategy {
                    scylla::cluster::metadata::Strategy::NetworkTopologyStrategy {
                        datacenter_repfactors,
                    } => datacenter_repfactors.get(&self.datacenter).copied(),
                    scylla::cluster::metadata::Strategy::SimpleStrategy { replication_factor } => {
                        Some(*replication_factor)
                    }
                    _ => None,
                });
        Context {
            keyspace: self.config.keyspace.clone(),
            datacenter: self.datacenter.clone(),
            replication_factor,
            dc_nodes: Self::dc_nodes(&self.session, &self.datacenter),
        }
    }

    /// Runs a request, retrying transient failures of idempotent ones under [`REQUEST_RETRY`] with
    /// [`CqlConfig::attempts`] attempts.
    pub(crate) async fn run<T, W, F, Fut>(&self, what: W, idempotent: bool, mut op: F) -> Result<T>
    where
        W: Fn() -> String,
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, ExecutionError>>,
    {
        let what = &what;
        REQUEST_RETRY
            .with_attempts(self.config.attempts)
            .retry(
                |e: &Error| idempotent && e.is_retryable(),
                || {
                    let attempt = op();
                    async move {
                        attempt
                            .await
                            .map_err(|e| error::execution(&what(), e, &self.context()))
                    }
                },
            )
            .await
    }

    /// [`Cluster::run`] for a write the calling task gives a deadline ([`deadline::current`]): each attempt is
    /// sent only while it holds. Past it, a first attempt fails with the check's `IntentLost` (nothing was sent);
    /// a retry is not sent, and the call fails with the error of the attempt before it (whose outcome is
    /// unknown). What the check cannot cover: a statement sent in time may reach replicas later, up to the
    /// commit window (`docs/guarantees.md`).
    pub(crate) async fn run_by_deadline<T, W, F, Fut>(
        &self,
        what: W,
        idempotent: bool,
        mut op: F,
    ) -> Result<T>
    where
        W: Fn() -> String,
        F: FnMut() -> Fut,
        Fut: Future<Output = std::result::Result<T, ExecutionError>>,
    {
        let Some(by) = deadline::current() else {
            return self.run(what, idempotent, op).await;
        };
        let mut tries = REQUEST_RETRY.with_attempts(self.config.attempts).start();
        let mut last = None;
        while tries.next_attempt().await {
            if let Err(late) = by.check() {
                return Err(last.unwrap_or(late));
            }
            match op().await {
                Ok(value) => return Ok(value),
                Err(e) => {
                    let e = error::execution(&what(), e, &self.context());
                    if !(idempotent && e.is_retryable()) {
                        return Err(e);
                    }
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::internal("cql", format!("{}: no attempt made", what()))))
    }

    /// The value of record `key` of namespace `ns`, if any.
    pub(crate) async fn get_record(&self, ns: Namespace, key: &[u8]) -> Result<Option<Bytes>> {
        let values = key_values(ns, key);
        let what = || format!("read of {ns:?} record \"{}\"", KeyDisplay::from(key));
        let result = self
            .run(what, true, || {
                self.session
                    .execute_unpaged(&self.st.records(ns).get, &values)
            })
            .await?;
        first_value(result, "record read")
    }

    /// The write time of record `key` of `ns` (Unix µs), `None` when it is absent.
    pub(crate) async fn write_time(&self, ns: Namespace, key: &[u8]) -> Result<Option<i64>> {
        let values = key_values(ns, key);
        let what = || format!("read of {ns:?} record \"{}\"", KeyDisplay::from(key));
        let result = self
            .run(what, true, || {
                self.session
                    .execute_unpaged(&self.st.records(ns).get_with_writetime, &values)
            })
            .await?;
        let row = result
            .into_rows_result()
            .map_err(|e| error::shape("record read", e))?
            .maybe_first_row::<(Option<Bytes>, Option<i64>)>()
            .map_err(|e| error::shape("record read", e))?;
        Ok(row.and_then(|(_, ts)| ts))
    }
}

/// The `value` column of the first row of `result`, if any.
pub(crate) fn first_value(result: QueryResult, what: &str) -> Result<Option<Bytes>> {
    let rows = result
        .into_rows_result()
        .map_err(|e| error::shape(what, e))?;
    let row = rows
        .maybe_first_row::<(Option<Bytes>,)>()
        .map_err(|e| error::shape(what, e))?;
    Ok(row.and_then(|(v,)| v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_wait_longer_each_time_up_to_two_seconds() {
        let waits: Vec<_> = REQUEST_RETRY.with_attempts(8).nominal_waits().collect();
        let ms = Duration::from_millis;
        assert_eq!(waits, [50, 100, 200, 400, 800, 1600, 2000].map(ms));
        assert_eq!(
            REQUEST_RETRY.attempts(),
            CqlConfig::new(["h"], "ks").attempts
        );
    }
}
