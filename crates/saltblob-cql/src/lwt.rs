//! Lightweight transactions: running a conditional write and reading its outcome, then settling it against
//! the client-timestamp clock of plain writes ([`settle`]).

use bytes::Bytes;
use saltblob_core::backend::Namespace;
use saltblob_core::{KeyDisplay, Result};
use scylla::response::query_result::QueryResult;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::{CqlValue, Row};

use crate::clock::{next_timestamp, observe_timestamp};
use crate::error;
use crate::session::Cluster;
use crate::statements::{V, key_values};

/// Executes a conditional write; returns whether it applied and, if not, the current value.
pub(crate) async fn execute(
    cluster: &Cluster,
    what: &str,
    st: &PreparedStatement,
    values: Vec<V>,
) -> Result<(bool, Option<Bytes>)> {
    let result = cluster
        .run(
            || what.to_owned(),
            false,
            || cluster.session.execute_unpaged(st, &values),
        )
        .await?;
    outcome(result, what)
}

/// After a conditional write applied (`written`: the new value, `None` for a delete; `before`: the value its
/// condition matched, `None` for "absent"): reads the row back. Cassandra stamps a conditional write with the
/// cluster's clock and plain writes carry this process's, so a plain write made just before (to the value
/// the condition saw) can carry a later timestamp and shadow the conditional one when the clocks differ by
/// more than the gap. The read-back detects that and writes the same outcome again, plainly, with a
/// timestamp after the shadowing one. It also moves the process clock past the conditional write's time,
/// so that later plain writes of this process order after it. Returns the write time the written value holds
/// once settled, when it was read (a write: `None` when the read-back failed or found another value).
pub(crate) async fn settle(
    cluster: &Cluster,
    ns: Namespace,
    key: &[u8],
    written: Option<&Bytes>,
    before: Option<&Bytes>,
) -> Option<i64> {
    let values = key_values(ns, key);
    let what = || "reading back a conditional write".to_owned();
    let st = cluster.st.records(ns);
    let outcome = cluster
        .run(what, true, || {
            cluster
                .session
                .execute_unpaged(&st.get_with_writetime, &values)
        })
        .await;
    let row = outcome.and_then(|r| {
        r.into_rows_result()
            .map_err(|e| error::shape("read-back", e))?
            .maybe_first_row::<(Option<Bytes>, Option<i64>)>()
            .map_err(|e| error::shape("read-back", e))
    });
    let (found, ts) = match row {
        Ok(Some((value, ts))) => (value, ts),
        Ok(None) => (None, None),
        Err(e) => {
            tracing::debug!("could not read back a conditional write: {e}");
            return None;
        }
    };
    if found.as_ref() == written {
        if let Some(ts) = ts {
            observe_timestamp(ts);
        }
        return ts;
    }
    let shown = KeyDisplay::from(key);
    if found.as_ref() != before {
        tracing::warn!(
            "conditional write of key \"{shown}\" was replaced right away by a concurrent write"
        );
        return None;
    }
    // Shadowed by the write the condition saw: write the outcome again, after it.
    let at = ts.map_or_else(next_timestamp, |t| {
        observe_timestamp(t);
        next_timestamp()
    });
    tracing::debug!(
        "conditional write of key \"{shown}\" was shadowed by an earlier write with a later timestamp \
         (client and cluster clocks differ); writing it again at {at}"
    );
    let what = || format!("re-asserting the conditional write of \"{shown}\"");
    let again = match written {
        Some(value) => {
            let mut row = key_values(ns, key);
            row.extend([V::Blob(value.clone()), V::Big(at)]);
            cluster
                .run(what, true, || {
                    cluster.session.execute_unpaged(&st.put, &row)
                })
                .await
        }
        None => {
            let mut row = vec![V::Big(at)];
            row.extend(key_values(ns, key));
            cluster
                .run(what, true, || {
                    cluster.session.execute_unpaged(&st.delete, &row)
                })
                .await
        }
    };
    match again {
        Ok(_) => written.map(|_| at),
        Err(e) => {
            tracing::warn!("could not re-assert the conditional write of \"{shown}\": {e}");
            None
        }
    }
}

/// Whether a conditional write applied and, if not, the current `value` (absent row: `None`).
pub(crate) fn outcome(result: QueryResult, what: &str) -> Result<(bool, Option<Bytes>)> {
    let rows = result
        .into_rows_result()
        .map_err(|e| error::shape(what, e))?;
    let value_index = rows.column_specs().get_by_name("value").map(|(i, _)| i);
    let row: Row = rows.first_row().map_err(|e| error::shape(what, e))?;
    let applied = match row.columns.first() {
        Some(Some(CqlValue::Boolean(b))) => *b,
        other => {
            return Err(error::malformed(
                what,
                format!("[applied] column is {other:?}"),
            ));
        }
    };
    let current = match value_index.and_then(|i| row.columns.get(i).cloned().flatten()) {
        Some(CqlValue::Blob(b)) => Some(Bytes::from(b)),
        Some(other) => return Err(error::malformed(what, format!("value column is {other:?}"))),
        None => None,
    };
    Ok((applied, current))
}
