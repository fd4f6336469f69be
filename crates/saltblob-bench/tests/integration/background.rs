//! `bench --background` end to end on a memory store: every figure there, consistent with the run, the JSON as
//! documented. No figure's size is asserted (performance is never asserted in tests), only what the run must be:
//! every version reclaimed once by the three runners, each share held by one of them.

use serde_json::Value;

use crate::tiny::bench_args;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_measures_every_figure_and_writes_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("background.json");
    let json_arg = json.to_str().expect("utf-8 path");
    let args = bench_args(&["--background", "--reclaim-queue", "400", "--json", json_arg]);
    let run = saltblob_bench::background_bench("memory://", &args)
        .await
        .expect("bench --background");
    assert_eq!(run.keys, 400);
    assert!(run.record_writes > 400, "{run:?}");
    assert!(
        run.busiest_partition_share > 0.0 && run.busiest_partition_share < 0.5,
        "{run:?}"
    );
    for (name, v) in [
        ("reclaim_entries_per_s", run.reclaim_entries_per_s),
        ("partitions only", run.reclaim_entries_per_s_partitions_only),
        ("one at a time", run.reclaim_entries_per_s_one_at_a_time),
    ] {
        assert!(v.is_finite() && v > 0.0, "{name}: {run:?}");
    }
    // 400 overwrites and 200 deletes queue 600 versions.
    assert_eq!(
        (run.shared_versions, run.duplicate_deletes),
        (600, 0),
        "{run:?}"
    );
    assert_eq!(run.shares_skipped.iter().sum::<u64>(), 32, "{run:?}");
    // 40 blobs with a short ttl each time: all found through the index, then all by the pass over every manifest.
    assert_eq!(run.expiry_blobs, 40);
    assert_eq!(
        (run.expired_by_index, run.expired_by_full_pass),
        (40, 40),
        "{run:?}"
    );
    assert!(
        run.expiry_index_pass_s > 0.0 && run.expiry_full_pass_s > 0.0,
        "{run:?}"
    );
    // The cluster's bound: a 1 TiB blob in partitions of at most 128 MiB; the memory store sets none.
    assert!(
        run.max_chunk_partition_bytes_cluster[1] <= 128 << 20,
        "{run:?}"
    );
    assert!(run.max_chunk_partition_bytes[1] > 1 << 30, "{run:?}");
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("parse");
    let b = &doc["background"];
    for field in [
        "busiest_partition_share",
        "reclaim_entries_per_s",
        "reclaim_entries_per_s_partitions_only",
        "reclaim_entries_per_s_one_at_a_time",
        "duplicate_deletes",
        "max_chunk_partition_bytes",
        "expiry_index_pass_s",
        "expiry_full_pass_s",
    ] {
        assert!(!b[field].is_null(), "{field}: {doc}");
    }
}
