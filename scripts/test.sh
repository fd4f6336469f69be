#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, property, conformance, CLI end-to-end, crash and memory tests,
# then the cluster backend on a real Cassandra (one node, then three for the node-loss test).
# Installs what it needs first. Every step is bounded in time.
cd "$(dirname "$0")/.."
source scripts/env.sh
saltblob_setup
saltblob_test_setup

# Every step's output is also logged, so that the last line can sum up every test binary's result.
log=$(mktemp -t saltblob-test.XXXXXX)
# Cassandra nodes started below are stopped on exit, even on failure.
trap 'scripts/cassandra.sh stop >/dev/null 2>&1 || true; rm -f "$log"' EXIT

step() {
  local name=$1
  shift
  echo "== $name: $*"
  local t0=$SECONDS
  "$@" 2>&1 | tee -a "$log"
  echo "== $name passed in $((SECONDS - t0)) s"
}

# The set-up's own detection, against faked machines, and this machine after its set-up (scripts/prereqs.sh).
step setup-checks timeout 120 scripts/test-setup.sh --this-machine
step format cargo fmt --all -- --check
# No import cycle between the files or the folders of any crate, and each crate's layout list in its order (the
# script's own self-test first: it must find a cycle and a list out of order).
step module-cycles sh -c 'python3 scripts/module-cycles.py --self-test && python3 scripts/module-cycles.py'
# One profile (release) for lints, tests and the CLI, so that RocksDB is compiled once.
step lint timeout 3600 cargo clippy --release --locked --workspace --all-targets -- -D warnings
step build timeout 3600 cargo build --release --locked --workspace --all-targets
# The documentation a user reads first: the README's length, every relative link of the docs, the README's quick
# start run as written with the binary just built, the systemd unit verified (the script's self-test first: each
# check must catch a case made to break it).
step docs timeout 600 sh -c 'python3 scripts/check-docs.py --self-test && python3 scripts/check-docs.py --saltblob "$CARGO_TARGET_DIR/release/saltblob"'
# The fault tests (crash loop, kills of a 200 MiB put, libfiu write/fsync failures, the extent files' faults: a
# kill between an extent's sync and its commit, a failed fdatasync, a full disk, a file system without O_DIRECT;
# the S3 server's disk faults: clients that declare much, send little and go away, on a loop-device file
# system; a full disk under load, then space freed, and ulimit -n 256 under 64 large puts and gets, both judged by
# the history checker; hot keys and the broken backends the history checker must catch) run in a step of their own, with their figures
# printed. Conformance on extent files and the truncated, foreign and read-only extent cases are in `tests`.
fault_tests=(crash:: crash_loop:: fault_injection:: extent_faults:: disk_faults:: resource_faults:: a_kill_between_extent_sync_and_commit history:: broken::)
skips=()
for t in "${fault_tests[@]}"; do skips+=(--skip "$t"); done
step tests timeout 1800 cargo test --release --locked --workspace -- "${skips[@]}"
step fault-tests timeout 1800 cargo test --release --locked --workspace -- --nocapture "${fault_tests[@]}"
# The aws-kms key provider against moto's KMS (PyPI, in a virtual environment) on loopback: sealing, revocation
# (DisableKey / EnableKey, ScheduleKeyDeletion), unknown keys, an unreachable KMS, and the CLI (scripts/kms-tests.sh).
step kms timeout 900 scripts/kms-tests.sh
# Real S3 clients (boto3, awscli v1 and s3cmd from PyPI into a virtual environment, rclone from Debian, the AWS SDK
# for Java v2 from Maven Central) against `saltblob serve` on the embedded
# store, with the 1 GiB `aws s3 cp` round trip and the server's peak RSS (scripts/s3-clients.sh).
step s3-clients-embedded timeout 1500 scripts/s3-clients.sh
# `saltblob bench --mixed` through `saltblob serve` with object_store's S3 client, a few seconds of it, and the
# server's side of it from its access log (scripts/s3-isolation.sh; the measured runs are in BENCHMARKS.md).
step s3-isolation timeout 300 scripts/s3-isolation.sh --smoke

# The cluster backend against a real Apache Cassandra 5.0 (jars from Maven Central, run by this machine's JVM on
# loopback; see docs/cassandra.md). Every start has a bounded wait.
step cassandra-one-node timeout 600 scripts/cassandra.sh start1
# The node takes TLS too (optional, with client certificates); its CA and a client certificate are in its tls
# directory, which the TLS tests read.
# The cluster tests are #[ignore]d (reported as skipped by the runs above, which have no cluster): here they are
# asked for with --include-ignored, without a rebuild. cluster:: needs three nodes; the stress test is by hand.
step cql-suite env TEST_CQL=127.0.0.1:9042 TEST_CQL_TLS_DIR="${SALTBLOB_CASSANDRA_WORK:-/tmp/saltblob-cassandra}/tls" \
  timeout 1800 cargo test --release --locked -p saltblob-cql -- \
  --include-ignored --skip cluster:: --skip six_clients_putting_60_mib_at_once
step cql-cli env TEST_CQL=127.0.0.1:9042 timeout 1800 cargo test --release --locked -p saltblob-cli --test integration \
  cql:: -- --include-ignored
# The multipart races of the S3 server, history-checked, on Cassandra (a keyspace of their own).
step cql-server-races env TEST_CQL=127.0.0.1:9042 timeout 600 cargo test --release --locked -p saltblob-server \
  --test integration multipart_history::multipart_races_lose_nothing_committed_cql -- --include-ignored
# The same S3 client tests on Cassandra, with a 64 MiB file for `aws s3 cp` (still 8 parts) to keep the suite short.
step s3-clients-cassandra env S3_BIG_FILE_MIB=64 timeout 1200 scripts/s3-clients.sh "cql://127.0.0.1:9042/s3clients_$(date +%s)"
# The Python package (pip install ./crates/saltblob-py into a venv of pinned packages; pytest on RocksDB and the node).
step python env TEST_CQL=127.0.0.1:9042 timeout 1800 scripts/python-tests.sh
step cassandra-three-nodes timeout 900 scripts/cassandra.sh start3
step cql-node-loss env TEST_CQL_CLUSTER=127.0.0.1,127.0.0.2,127.0.0.3 timeout 1200 \
  cargo test --release --locked -p saltblob-cql --test integration cluster:: -- --include-ignored --nocapture
step cassandra-stop scripts/cassandra.sh stop
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     /^(setup|module-cycles): [0-9]+ passed, [0-9]+ failed$/ { p += $2; f += $4 }
     # pytest: "==== 3 failed, 30 passed, 1 skipped, 2 errors in 12.34s (0:00:12) ===="
     /^=+ .* in [0-9.]+s( \([0-9:]+\))? =+$/ {
       for (k = 2; k < NF; k++) {
         w = $(k + 1)
         sub(/,$/, "", w)
         if (w == "passed") p += $k
         else if (w == "failed" || w == "error" || w == "errors") f += $k
         else if (w == "skipped") i += $k
       }
     }
     END { printf "saltblob: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
