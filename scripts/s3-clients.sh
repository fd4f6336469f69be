#!/usr/bin/env bash
# Real S3 clients against `saltblob serve`: the pytest suite in tests/s3 (boto3; awscli v1, s3cmd, rclone and the
# AWS SDK for Java v2 run as commands), or with --bench the S3 bench (scripts/s3-bench.py) next to `saltblob bench`
# on a second store of the same kind. boto3, awscli, s3cmd and pytest come from PyPI, pinned in
# tests/s3/requirements.txt, into a virtual environment that is reused while that file is unchanged; rclone is
# Debian's package, installed with the test set-up (scripts/prereqs.sh), as are Java 17 and Maven, which fetches
# the SDK's jars (tests/s3/java/pom.xml) from Maven Central into the cache, reused while that file is unchanged.
#
#   scripts/s3-clients.sh [STORE_URL] [-- PYTEST_ARGS...]
#   scripts/s3-clients.sh --bench [STORE_URL] [-- S3_BENCH_ARGS...]
#
# STORE_URL is rocksdb:///DIR or cql://HOST:9042/KEYSPACE; by default an embedded store in a fresh temporary
# directory. The tests start the server themselves (tests/s3/saltblob_server.py: a free loopback port, fresh
# credentials, at most 60 s to answer, else the failure shows the server's log) and stop it when done; should they
# be killed first, this script stops every server whose pid file they left. The gc test and the bench's direct
# run use a second store next to STORE_URL (directory "-SUFFIX", keyspace "_SUFFIX").
#
# Environment:
#   SALTBLOB_BIN       the saltblob binary (default: $CARGO_TARGET_DIR/release/saltblob, CARGO_TARGET_DIR as
#                      scripts/env.sh sets it)
#   SALTBLOB_CACHE     where the virtual environment and the Java jars live (default ~/.cache/saltblob; they are
#                      venv-s3, java-sdk and its Maven repository m2-s3 there)
#   S3_BIG_FILE_MIB    size of the `aws s3 cp` round-trip file (default 1024)
#   S3_RSS_LIMIT_MIB   bound on the server's peak RSS after that upload (default 256; why: tests/s3/test_awscli.py)
#
# Prints the server's peak resident memory (VmHWM) after the big upload and at the end of the session.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

mode=tests
if [ "${1:-}" = --bench ]; then
  mode=bench
  shift
fi
saltblob_store_and_args "$@"
set -- "${rest_args[@]}"

bin=$(saltblob_binary)

venv=${SALTBLOB_CACHE:-$HOME/.cache/saltblob}/venv-s3
requirements=tests/s3/requirements.txt

java_pom=tests/s3/java/pom.xml
java_lib=${SALTBLOB_CACHE:-$HOME/.cache/saltblob}/java-sdk
java_repo=${SALTBLOB_CACHE:-$HOME/.cache/saltblob}/m2-s3

# The AWS SDK for Java's jars (those pom.xml names, with their dependencies) in $java_lib, fetched by Maven into
# its own local repository next to it unless they were fetched from this very pom.xml before.
ensure_java_sdk() {
  if [ -f "$java_lib/.saltblob-pom" ] && cmp -s "$java_lib/.saltblob-pom" "$java_pom"; then
    echo "== s3-clients: the AWS SDK for Java's jars in $java_lib are up to date"
    return 0
  fi
  echo "== s3-clients: fetching the AWS SDK for Java's jars of $java_pom into $java_lib"
  rm -rf "$java_lib"
  if ! mvn -B -q -f "$java_pom" -Dmaven.repo.local="$java_repo" \
    org.apache.maven.plugins:maven-dependency-plugin:2.8:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$java_lib" >"$work/mvn.log" 2>&1; then
    tail -n 30 "$work/mvn.log" >&2
    echo "error: Maven could not fetch the jars of $java_pom (above): check the network to Maven Central" >&2
    exit 1
  fi
  cp "$java_pom" "$java_lib/.saltblob-pom"
}

work=$(mktemp -d -t saltblob-s3.XXXXXX)

# Stops every server the tests left running (their pid files), then removes the scratch directory.
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  local f
  for f in "$work"/*.pid; do
    [ -e "$f" ] || continue
    saltblob_stop_pid "$(<"$f")"
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

saltblob_venv s3-clients "$venv" "$requirements" "python -c 'import awscli, boto3, pytest' && command -v s3cmd"
store_url=${store_url:-rocksdb://$work/store}

if [ "$mode" = bench ]; then
  "$venv/bin/python" scripts/s3-bench.py --saltblob "$bin" --store "$store_url" --work "$work" "$@"
  exit
fi

# rclone (test group), Java 17 and Maven (the test Cassandra's group) from Debian, if missing.
saltblob_test_setup
ensure_java_sdk
java_bin=$(prereq_find_java17)

echo "== s3-clients: pytest tests/s3 against saltblob serve on $store_url (big file ${S3_BIG_FILE_MIB:-1024} MiB)"
status=0
env SALTBLOB_BIN="$bin" S3_TEST_STORE="$store_url" S3_TEST_WORK="$work" S3_JAVA="$java_bin" S3_JAVA_LIB="$java_lib" \
  "$venv/bin/python" -m pytest tests/s3 -v --durations=5 -p no:cacheprovider --basetemp "$work/pytest" "$@" || status=$?
if [ -f "$work/rss-after-big-upload" ]; then
  echo "== s3-clients: server peak RSS (VmHWM) $(<"$work/rss-after-big-upload") (bound ${S3_RSS_LIMIT_MIB:-256} MiB)"
fi
if [ -f "$work/peak-rss-kib" ]; then
  echo "== s3-clients: server peak RSS (VmHWM) over the whole session $(($(<"$work/peak-rss-kib") / 1024)) MiB"
fi
if [ "$status" != 0 ] && [ -f "$work/server.log" ]; then
  echo "== s3-clients: last lines of the server's log"
  tail -n 30 "$work/server.log"
fi
exit "$status"
