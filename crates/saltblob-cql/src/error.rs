//! Mapping of driver errors into saltblob's: every error is an [`Error::Backend`] named `cql`, retryable when
//! the same request may succeed later (timeouts, unavailable replicas, overload, broken connections). The
//! driver's error is kept as the [`std::error::Error::source`]; the message says what saltblob was doing and
//! repeats the driver's text, so that a one-line report is complete.

use std::fmt::Display;

use saltblob_core::BoxError;
use saltblob_core::Error;
use scylla::errors::{
    DbError, ExecutionError, NewSessionError, PrepareError, RequestAttemptError,
    SchemaAgreementError, WriteType,
};

/// Backend name used in errors.
pub const NAME: &str = "cql";

/// What an error message needs to explain an unavailable or oversized request.
#[derive(Clone, Debug, Default)]
pub struct Context {
    /// The keyspace.
    pub keyspace: String,
    /// The data center requests go to.
    pub datacenter: String,
    /// The keyspace's replication factor in that data center, if known.
    pub replication_factor: Option<usize>,
    /// Nodes of that data center known to the driver.
    pub dc_nodes: usize,
}

/// Maps the failure of request `what` (e.g. `write of 3 chunks of key "k"`).
pub fn execution(what: &str, e: ExecutionError, ctx: &Context) -> Error {
    let (retryable, hint) = classify(&e, ctx);
    Error::backend_caused(NAME, format!("{what} failed: {e}{hint}"), retryable, e)
}

/// Maps driver error `e`, with `message` saying what failed (and `retryable` whether a retry may help).
pub fn driver<E>(message: impl Display, retryable: bool, e: E) -> Error
where
    E: Into<BoxError>,
{
    Error::backend_caused(NAME, message, retryable, e)
}

/// Whether `e` is transient, and an explanation to append to its message.
fn classify(e: &ExecutionError, ctx: &Context) -> (bool, String) {
    match e {
        ExecutionError::RequestTimeout(_) => (
            true,
            " (client-side request_timeout; the cluster is slow or overloaded)".to_owned(),
        ),
        ExecutionError::ConnectionPoolError(_) => {
            (true, " (no connection to the node; is it up?)".to_owned())
        }
        ExecutionError::EmptyPlan => (
            false,
            format!(
                " (no node of data center \"{}\" can take requests; check dc= and that nodes are up)",
                ctx.datacenter
            ),
        ),
        ExecutionError::LastAttemptError(attempt) => classify_attempt(attempt, ctx),
        ExecutionError::PrepareError(p) => (prepare_retryable(p), String::new()),
        ExecutionError::SchemaAgreementError(_) | ExecutionError::MetadataError(_) => {
            (true, String::new())
        }
        _ => (false, String::new()),
    }
}

fn prepare_retryable(e: &PrepareError) -> bool {
    match e {
        PrepareError::ConnectionPoolError(_) => true,
        PrepareError::AllAttemptsFailed { first_attempt } => {
            classify_attempt(first_attempt, &Context::default()).0
        }
        _ => false,
    }
}

fn classify_attempt(e: &RequestAttemptError, ctx: &Context) -> (bool, String) {
    match e {
        RequestAttemptError::UnableToAllocStreamId
        | RequestAttemptError::BrokenConnectionError(_) => (true, String::new()),
        RequestAttemptError::DbError(db, message) => classify_db(db, message, ctx),
        _ => (false, String::new()),
    }
}

fn classify_db(db: &DbError, message: &str, ctx: &Context) -> (bool, String) {
    match db {
        DbError::Unavailable {
            required,
            alive,
            consistency,
        } => {
            let rf = ctx
                .replication_factor
                .map_or_else(|| "unknown".to_owned(), |rf| rf.to_string());
            let cause = match ctx.replication_factor {
                Some(rf) if rf > ctx.dc_nodes => format!(
                    "keyspace {} has replication factor {rf} in data center \"{}\", which has only {} node(s): \
                     lower the keyspace's replication factor (ALTER KEYSPACE) or add nodes",
                    ctx.keyspace, ctx.datacenter, ctx.dc_nodes
                ),
                _ if usize::try_from(*required).is_ok_and(|r| r > ctx.dc_nodes)
                    && ctx.dc_nodes > 0 =>
                {
                    format!(
                        "consistency {consistency} needs {required} replicas, more than the {} node(s) of data center \
                     \"{}\" (replication factor {rf}): use a lower consistency",
                        ctx.dc_nodes, ctx.datacenter
                    )
                }
                _ => format!(
                    "{} replica(s) down; replication factor {rf}, consistency {consistency}",
                    // Counts from the server: no overflow, no negative count.
                    required.saturating_sub(*alive).max(0)
                ),
            };
            (true, format!(" ({cause})"))
        }
        DbError::WriteTimeout {
            write_type: WriteType::Cas,
            ..
        } => (
            false,
            " (conditional write timed out: its outcome is unknown; read the key to find out)"
                .to_owned(),
        ),
        DbError::ReadTimeout { .. }
        | DbError::WriteTimeout { .. }
        | DbError::Overloaded
        | DbError::IsBootstrapping
        | DbError::RateLimitReached { .. } => (true, String::new()),
        DbError::ReadFailure { .. } | DbError::WriteFailure { .. } | DbError::ServerError => {
            (true, String::new())
        }
        DbError::Invalid
            if message.contains("too large") || message.contains("Batch too large") =>
        {
            (
                false,
                " (a request exceeded a Cassandra size limit; lower the chunk size or batch_bytes)"
                    .to_owned(),
            )
        }
        DbError::Unauthorized | DbError::AuthenticationError => (
            false,
            " (check the user and password in the URL, and the user's permissions)".to_owned(),
        ),
        _ => (false, String::new()),
    }
}

/// Explains a failure to open a session: hosts unreachable within the connect timeout, bad credentials, ...
pub fn connect(hosts: &[String], timeout: std::time::Duration, e: NewSessionError) -> Error {
    let message = format!(
        "cannot connect to the cluster at {} within {:?}: {e} (check that the hosts are right and Cassandra or \
             ScyllaDB listens for CQL there)",
        hosts.join(","),
        timeout
    );
    Error::backend_caused(NAME, message, true, e)
}

/// Maps a failure to wait for schema agreement after creating tables.
pub fn schema(e: SchemaAgreementError) -> Error {
    let message = format!("the cluster's nodes did not agree on the new schema: {e}");
    Error::backend_caused(NAME, message, true, e)
}

/// Maps a failure to prepare a statement.
pub fn prepare(statement: &str, e: PrepareError) -> Error {
    let retryable = prepare_retryable(&e);
    Error::backend_caused(
        NAME,
        format!("cannot prepare \"{statement}\": {e}"),
        retryable,
        e,
    )
}

/// Data the cluster returned does not have the expected shape, as the driver's decoding error `e` says.
pub fn shape<E>(what: &str, e: E) -> Error
where
    E: std::error::Error + Send + Sync + 'static,
{
    Error::backend_caused(NAME, format!("unexpected result of {what}: {e}"), false, e)
}

/// Data the cluster returned does not have the expected shape, as saltblob found (`detail`).
pub fn malformed(what: &str, detail: impl Display) -> Error {
    Error::backend(
        NAME,
        format!("unexpected result of {what}: {detail}"),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use scylla::statement::Consistency;

    fn ctx(rf: usize, nodes: usize) -> Context {
        Context {
            keyspace: "ks".into(),
            datacenter: "dc1".into(),
            replication_factor: Some(rf),
            dc_nodes: nodes,
        }
    }

    fn db(e: DbError) -> ExecutionError {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(e, "server message".into()))
    }

    #[test]
    fn unavailable_explains_replication_factor_larger_than_the_cluster() {
        let e = db(DbError::Unavailable {
            consistency: Consistency::LocalQuorum,
            required: 2,
            alive: 1,
        });
        let mapped = execution("write", e, &ctx(3, 1));
        assert!(mapped.is_retryable());
        let m = mapped.to_string();
        assert!(
            m.contains("replication factor 3") && m.contains("only 1 node"),
            "{m}"
        );
        let m = execution(
            "write",
            db(DbError::Unavailable {
                consistency: Consistency::Three,
                required: 3,
                alive: 1,
            }),
            &ctx(1, 1),
        )
        .to_string();
        assert!(m.contains("use a lower consistency"), "{m}");
        let m = execution(
            "write",
            db(DbError::Unavailable {
                consistency: Consistency::Quorum,
                required: 2,
                alive: 1,
            }),
            &ctx(3, 3),
        )
        .to_string();
        assert!(m.contains("1 replica(s) down"), "{m}");
        for (required, alive) in [(i32::MIN, 1), (1, 2)] {
            let m = execution(
                "write",
                db(DbError::Unavailable {
                    consistency: Consistency::Quorum,
                    required,
                    alive,
                }),
                &ctx(3, 3),
            )
            .to_string();
            assert!(m.contains("(0 replica(s) down"), "{m}");
        }
    }

    #[test]
    fn transient_errors_are_retryable_and_others_not() {
        let c = ctx(1, 1);
        let timeout = db(DbError::WriteTimeout {
            consistency: Consistency::One,
            received: 0,
            required: 1,
            write_type: WriteType::Simple,
        });
        assert!(execution("w", timeout, &c).is_retryable());
        assert!(execution("w", db(DbError::Overloaded), &c).is_retryable());
        assert!(
            execution(
                "w",
                ExecutionError::RequestTimeout(std::time::Duration::from_secs(1)),
                &c
            )
            .is_retryable()
        );
        let cas = db(DbError::WriteTimeout {
            consistency: Consistency::One,
            received: 0,
            required: 1,
            write_type: WriteType::Cas,
        });
        let m = execution("w", cas, &c);
        assert!(
            !m.is_retryable() && m.to_string().contains("outcome is unknown"),
            "{m}"
        );
        assert!(!execution("w", db(DbError::SyntaxError), &c).is_retryable());
        assert!(!execution("w", ExecutionError::EmptyPlan, &c).is_retryable());
        let m = execution("w", db(DbError::Invalid), &c);
        assert!(!m.is_retryable());
        assert!(
            m.to_string().starts_with("cql backend error: w failed"),
            "{m}"
        );
    }

    #[test]
    fn driver_errors_are_kept_as_the_source() {
        use std::error::Error as _;
        let mapped = execution("write", db(DbError::Overloaded), &ctx(1, 1));
        let source = mapped.source().expect("the driver's error is kept");
        assert!(
            source.downcast_ref::<ExecutionError>().is_some(),
            "{source:?}"
        );
        assert!(mapped.to_string().contains("write failed"), "{mapped}");
        let prepared = prepare(
            "SELECT 1",
            PrepareError::ConnectionPoolError(scylla::errors::ConnectionPoolError::Initializing),
        );
        assert!(prepared.source().is_some() && prepared.is_retryable());
        let agreement = schema(SchemaAgreementError::Timeout(
            std::time::Duration::from_secs(1),
        ));
        assert!(agreement.source().is_some() && agreement.is_retryable());
        let own = malformed("record read", "a row without a value");
        assert!(own.source().is_none());
    }
}
