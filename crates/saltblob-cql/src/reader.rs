//! Chunk reads: a `get_chunks` call is cut into requests of one partition each: a run of consecutive chunk
//! indexes (a single-partition blob's segment) is one slice (`idx >= ? AND idx <= ?`), the scattered indexes of a
//! partition (a salted blob's segment holds every `salt_count`-th chunk) one `IN` list. The caller bounds the
//! bytes of one call ([`crate::backend::MAX_BATCH_BYTES`]), so each request's response stays within it.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use saltblob_core::backend::{BlobRef, ChunkId};
use saltblob_core::{Error, KeyDisplay, Result};

use crate::error;
use crate::session::Cluster;

/// One request of a `get_chunks` call: chunks of one partition (salt).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ReadUnit {
    /// Every index from `first` to `last`, both included: one slice of the partition.
    Range { salt: i32, first: i64, last: i64 },
    /// Indexes that are not consecutive: one `IN` list.
    List { salt: i32, idxs: Vec<i64> },
}

impl ReadUnit {
    fn salt(&self) -> i32 {
        match self {
            ReadUnit::Range { salt, .. } | ReadUnit::List { salt, .. } => *salt,
        }
    }

    fn len(&self) -> usize {
        match self {
            ReadUnit::Range { first, last, .. } => usize::try_from(last - first + 1).unwrap_or(0),
            ReadUnit::List { idxs, .. } => idxs.len(),
        }
    }
}

/// The requests reading `chunks` (duplicates read once): per salt, each run of two or more consecutive indexes
/// is a [`ReadUnit::Range`], the other indexes of the salt one [`ReadUnit::List`].
pub(crate) fn plan(chunks: &[ChunkId]) -> Result<Vec<ReadUnit>> {
    let mut by_salt: BTreeMap<i32, BTreeSet<i64>> = BTreeMap::new();
    for c in chunks {
        let salt = i32::try_from(c.salt)
            .map_err(|_| Error::invalid("salt", format!("{} is over 2^31", c.salt)))?;
        let idx = i64::try_from(c.index)
            .map_err(|_| Error::invalid("chunk index", format!("{} is over 2^63", c.index)))?;
        by_salt.entry(salt).or_default().insert(idx);
    }
    let mut units = Vec::new();
    for (salt, idxs) in by_salt {
        let mut scattered = Vec::new();
        let mut run: Option<(i64, i64)> = None;
        let mut close = |run: (i64, i64), scattered: &mut Vec<i64>| {
            if run.0 == run.1 {
                scattered.push(run.0);
            } else {
                units.push(ReadUnit::Range {
                    salt,
                    first: run.0,
                    last: run.1,
                });
            }
        };
        for idx in idxs {
            run = match run {
                Some((first, last)) if idx == last + 1 => Some((first, idx)),
                Some(done) => {
                    close(done, &mut scattered);
                    Some((idx, idx))
                }
                None => Some((idx, idx)),
            };
        }
        if let Some(done) = run {
            close(done, &mut scattered);
        }
        if !scattered.is_empty() {
            units.push(ReadUnit::List {
                salt,
                idxs: scattered,
            });
        }
    }
    Ok(units)
}

/// Runs one read request of `blob` (whose version is `version`, big-endian); returns the chunks found, by
/// (salt, index).
pub(crate) async fn read_unit(
    cluster: &Cluster,
    blob: &BlobRef,
    version: &Bytes,
    unit: &ReadUnit,
) -> Result<Vec<((i32, i64), Bytes)>> {
    let salt = unit.salt();
    let (key, version) = (blob.key.clone(), version.clone());
    let what = || {
        format!(
            "read of {} chunk(s) (salt {salt}) of key \"{}\" version {}",
            unit.len(),
            KeyDisplay::from(&key[..]),
            blob.version
        )
    };
    let st = &cluster.st;
    let result = match unit {
        ReadUnit::Range { first, last, .. } => {
            let values = (&key, &version, salt, *first, *last);
            cluster
                .run(what, true, || {
                    cluster
                        .session
                        .execute_unpaged(&st.get_chunk_range, &values)
                })
                .await?
        }
        ReadUnit::List { idxs, .. } => {
            let values = (&key, &version, salt, idxs);
            cluster
                .run(what, true, || {
                    cluster.session.execute_unpaged(&st.get_chunks, &values)
                })
                .await?
        }
    };
    let rows = result
        .into_rows_result()
        .map_err(|e| error::shape("chunk read", e))?;
    let mut found = Vec::with_capacity(unit.len());
    for row in rows
        .rows::<(i64, Bytes)>()
        .map_err(|e| error::shape("chunk read", e))?
    {
        let (idx, data) = row.map_err(|e| error::shape("chunk read", e))?;
        found.push(((salt, idx), data));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(salt_count: u32, indexes: impl IntoIterator<Item = u64>) -> Vec<ChunkId> {
        indexes
            .into_iter()
            .map(|index| ChunkId {
                salt: u32::try_from(index % u64::from(salt_count)).unwrap_or(0),
                index,
            })
            .collect()
    }

    #[test]
    fn consecutive_indexes_of_a_partition_are_one_slice() {
        assert_eq!(
            plan(&ids(1, 16..32)).expect("plan"),
            vec![ReadUnit::Range {
                salt: 0,
                first: 16,
                last: 31
            }]
        );
    }

    #[test]
    fn scattered_indexes_are_one_list_per_salt() {
        // A salted segment: every third chunk is in one partition.
        let units = plan(&ids(3, 0..7)).expect("plan");
        assert_eq!(
            units,
            vec![
                ReadUnit::List {
                    salt: 0,
                    idxs: vec![0, 3, 6]
                },
                ReadUnit::List {
                    salt: 1,
                    idxs: vec![1, 4]
                },
                ReadUnit::List {
                    salt: 2,
                    idxs: vec![2, 5]
                },
            ]
        );
    }

    #[test]
    fn runs_and_strays_mix_and_duplicates_are_read_once() {
        let mut chunks = ids(1, [9, 2, 3, 4, 7, 3, 12, 13]);
        chunks.push(ChunkId { salt: 5, index: 0 });
        assert_eq!(
            plan(&chunks).expect("plan"),
            vec![
                ReadUnit::Range {
                    salt: 0,
                    first: 2,
                    last: 4
                },
                ReadUnit::Range {
                    salt: 0,
                    first: 12,
                    last: 13
                },
                ReadUnit::List {
                    salt: 0,
                    idxs: vec![7, 9]
                },
                ReadUnit::List {
                    salt: 5,
                    idxs: vec![0]
                },
            ]
        );
        assert!(plan(&[]).expect("plan").is_empty());
        assert!(
            plan(&[ChunkId {
                salt: u32::MAX,
                index: 0
            }])
            .is_err()
        );
    }
}
