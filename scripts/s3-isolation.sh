#!/usr/bin/env bash
# Isolation through the S3 server (issue 23): `saltblob bench --mixed` driven through `saltblob serve` by
# object_store's S3 client (the bench's `s3+http://` target), the same closed-loop capacities and paced loads as on
# a store. Starts the server on a free loopback port over STORE_URL (default: an embedded store in a fresh
# temporary directory) with fresh credentials, a bucket for the bench (--create-bucket) and its metrics, waits at
# most 60 s for it to answer, runs the bench, saves the server's metrics (per-class request latency), and stops
# the server (SIGTERM, then SIGKILL after 30 s) whatever happened.
#
#   scripts/s3-isolation.sh [STORE_URL] [-- BENCH_ARGS...]
#   scripts/s3-isolation.sh --smoke [STORE_URL]
#
# --smoke (the test suite's step): a run of a few seconds with small sizes, which fails unless every phase ran
# without a failed operation, both paced loads were measured and the server's log gave its side of them.
#
# BENCH_ARGS default to `--mixed 10`; give `--json FILE` to keep the results. The server's metrics at the end go
# to FILE.metrics.txt next to --json FILE (else they are printed).
#
# Environment:
#   SALTBLOB_BIN        the saltblob binary (default: $CARGO_TARGET_DIR/release/saltblob, CARGO_TARGET_DIR as
#                       scripts/env.sh sets it)
#   S3_ISOLATION_QUERY  the client's settings as the bench's S3 URL query (object_store's S3 configuration keys),
#                       e.g. aws_unsigned_payload=true
#
# After the bench, scripts/s3-server-side.py reads the server's access log: the small requests' durations as the
# server measured them, per phase of the large loops (with --json FILE also written to FILE.server-side.json).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

smoke=
if [ "${1:-}" = --smoke ]; then
  smoke=1
  shift
fi
saltblob_store_and_args "$@"
set -- "${rest_args[@]}"
[ $# -gt 0 ] || set -- --mixed 10

bin=$(saltblob_binary)

work=$(mktemp -d "${TMPDIR:-/tmp}/saltblob-s3-isolation.XXXXXX")
server=
cleanup() {
  if [ -n "$server" ]; then
    saltblob_stop_pid "$server" 30
    wait "$server" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

store_url=${store_url:-rocksdb://$work/store}
if [ -n "$smoke" ]; then
  set -- -q --count 2 --large-mb 16 --small-kb 16 --mixed 1 --paced-samples 200 --paced-grace 2 \
    --json "$work/smoke.json"
fi
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
port=$(free_port)
metrics_port=$(free_port)
bucket=saltblob-bench
access_key=AKID$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
secret=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')

echo "== s3-isolation: saltblob serve on 127.0.0.1:$port over $store_url (log $work/server.log)"
env SALTBLOB_ACCESS_KEY_ID="$access_key" SALTBLOB_SECRET_ACCESS_KEY="$secret" \
  "$bin" --store "$store_url" serve --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$metrics_port" \
  --create-bucket "$bucket" --gc-every 0 >"$work/server.log" 2>&1 &
server=$!
for i in $(seq 600); do
  if grep -q "serving S3 on" "$work/server.log" 2>/dev/null; then
    break
  fi
  if ! kill -0 "$server" 2>/dev/null || [ "$i" = 600 ]; then
    echo "error: the server did not start within 60 s; its log:" >&2
    cat "$work/server.log" >&2
    exit 1
  fi
  sleep 0.1
done

status=0
env AWS_ACCESS_KEY_ID="$access_key" AWS_SECRET_ACCESS_KEY="$secret" \
  "$bin" --store "s3+http://127.0.0.1:$port/$bucket${S3_ISOLATION_QUERY:+?$S3_ISOLATION_QUERY}" bench "$@" ||
  status=$?

json=
prev=
for arg in "$@"; do
  [ "$prev" = --json ] && json=$arg
  case $arg in --json=*) json=${arg#--json=} ;; esac
  prev=$arg
done
metrics=$(python3 - "$metrics_port" <<'EOF'
import sys, urllib.request
print(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=10).read().decode())
EOF
) || metrics="(the metrics could not be read)"
if [ -n "$json" ]; then
  printf '%s\n' "$metrics" >"$json.metrics.txt"
  [ -n "$smoke" ] || echo "== s3-isolation: the server's metrics in $json.metrics.txt"
  python3 scripts/s3-server-side.py "$work/server.log" --json "$json.server-side.json" || true
else
  printf '%s\n' "$metrics" | grep -E '^saltblob_s3_request_duration_seconds_(count|sum)' || true
  python3 scripts/s3-server-side.py "$work/server.log" || true
fi
if [ "$status" = 0 ] && [ -n "$smoke" ]; then
  python3 scripts/s3-server-side.py --check-smoke "$work/smoke.json" || status=1
fi
if [ "$status" != 0 ]; then
  echo "== s3-isolation: failed ($status); last lines of the server's log"
  tail -n 30 "$work/server.log"
fi
exit "$status"
