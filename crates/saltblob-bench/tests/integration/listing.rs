//! `bench --listing` end to end on a memory store: every N measured, every figure there, the JSON as documented.
//! No figure's size is asserted (performance is never asserted in tests), only that the run is consistent.

use serde_json::Value;

use crate::tiny::bench_args;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listing_measures_each_size_and_writes_the_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let json = dir.path().join("listing.json");
    let json_arg = json.to_str().expect("utf-8 path");
    let args = bench_args(&[
        "--listing",
        "--listing-sizes",
        "1200,300",
        "--json",
        json_arg,
    ]);
    let runs = saltblob_bench::listing_bench("memory://", &args)
        .await
        .expect("bench --listing");
    assert_eq!(
        runs.iter().map(|r| r.n).collect::<Vec<_>>(),
        [300, 1200],
        "sizes ascending"
    );
    for run in &runs {
        for (name, v) in [
            ("ls_first_page_ms", run.ls_first_page_ms),
            ("ls_middle_page_ms", run.ls_middle_page_ms),
            ("prefix_page_ms", run.prefix_page_ms),
            ("pass_rows_per_s_serial", run.pass_rows_per_s_serial),
            ("pass_rows_per_s_parallel", run.pass_rows_per_s_parallel),
            ("list_rows_per_s", run.list_rows_per_s),
        ] {
            assert!(v.is_finite() && v > 0.0, "{name} = {v} at N = {}", run.n);
        }
        assert!(run.s3_page_ms.is_some_and(|v| v > 0.0), "{run:?}");
        assert!(run.s3_delimiter_page_ms.is_some_and(|v| v > 0.0), "{run:?}");
        // A memory store has no listing index to count reads of.
        assert_eq!(run.driver_pages_per_page, None, "{run:?}");
    }
    let doc: Value =
        serde_json::from_slice(&std::fs::read(&json).expect("json written")).expect("json");
    let listed = doc["listing"]["runs"].as_array().expect("listing.runs");
    assert_eq!(listed.len(), 2, "{doc}");
    for field in [
        "n",
        "ls_first_page_ms",
        "ls_middle_page_ms",
        "prefix_page_ms",
        "s3_page_ms",
        "s3_delimiter_page_ms",
        "driver_pages_per_page",
        "pass_rows_per_s_serial",
        "pass_rows_per_s_parallel",
    ] {
        assert!(listed[1].get(field).is_some(), "{field} missing: {doc}");
    }
    assert_eq!(listed[1]["n"], 1200, "{doc}");
}
