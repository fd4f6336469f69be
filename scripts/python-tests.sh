#!/usr/bin/env bash
# The Python package's tests: builds and installs ./crates/saltblob-py (maturin, release profile, in the
# workspace's build directory, so that RocksDB is not compiled again) into a virtual environment of pinned
# packages (tests/python/requirements.txt: pytest, pytest-asyncio, hypothesis, maturin; fsspec, pandas, pyarrow and
# dask for the saltblob:// filesystem's consumers, s3fs for its bench, mypy for the stubs), then runs pytest on
# tests/python: every test on a temporary RocksDB store, and on a Cassandra/ScyllaDB node too when TEST_CQL names
# one (HOST:PORT; each run makes its own keyspaces and drops them).
#
#   scripts/python-tests.sh [-- PYTEST_ARGS...]
#   scripts/python-tests.sh --bench [-- PYTHON_BENCH_ARGS...]
#   scripts/python-tests.sh --fsspec-bench [-- PYTHON_FSSPEC_BENCH_ARGS...]
#   scripts/python-tests.sh --reference-scripts DIR [-- PYTHON_REFERENCE_ARGS...]
#
# --bench runs scripts/python-bench.py (the package against `saltblob bench` on the same store; with --reference,
# the compat class against the salting article's class) with --saltblob $CARGO_TARGET_DIR/release/saltblob.
# --fsspec-bench runs scripts/python-fsspec-bench.py (a parquet dataset read through saltblob://, from the local file
# system, and through `saltblob serve` with s3fs) with --saltblob $CARGO_TARGET_DIR/release/saltblob.
# --reference-scripts runs scripts/python-reference.py: the article's own demo.py and benchmark.py, fetched into DIR,
# as they are and with their one import changed to saltblob.compat, on a Cassandra node.
#
# Environment:
#   TEST_CQL          HOST:PORT of a Cassandra or ScyllaDB node (without it, the Cassandra tests are skipped)
#   SALTBLOB_CACHE    where the virtual environment lives (default ~/.cache/saltblob; it is venv-py there), reused
#                     while tests/python/requirements.txt is unchanged
#   CARGO_TARGET_DIR  the build directory (default as scripts/env.sh sets it)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
mode=tests
if [ "${1:-}" = --bench ]; then
  mode=bench
  shift
elif [ "${1:-}" = --fsspec-bench ]; then
  mode=fsspec-bench
  shift
elif [ "${1:-}" = --reference-scripts ]; then
  mode=reference
  reference_dir=${2:?--reference-scripts needs a directory: the one holding demo.py, benchmark.py and salted_blob_store.py}
  shift 2
fi
[ "${1:-}" = -- ] && shift

venv=${SALTBLOB_CACHE:-$HOME/.cache/saltblob}/venv-py
requirements=tests/python/requirements.txt

saltblob_venv python-tests "$venv" "$requirements" \
  "python -c 'import hypothesis, pytest, pytest_asyncio, fsspec, pandas, pyarrow, dask.dataframe, mypy, s3fs' && command -v maturin"

# The package, built by the environment's maturin (no build isolation: nothing fetched per run) in the release
# profile (pyproject.toml) in $CARGO_TARGET_DIR; only the crate itself is compiled when the workspace was built.
echo "== python-tests: building and installing ./crates/saltblob-py (CARGO_TARGET_DIR=$CARGO_TARGET_DIR)"
t0=$SECONDS
PATH="$venv/bin:$PATH" timeout 3600 "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input \
  --no-build-isolation --no-deps --force-reinstall ./crates/saltblob-py
echo "== python-tests: installed in $((SECONDS - t0)) s"

if [ "$mode" = bench ]; then
  exec "$venv/bin/python" scripts/python-bench.py --saltblob "$CARGO_TARGET_DIR/release/saltblob" "$@"
fi
if [ "$mode" = fsspec-bench ]; then
  exec "$venv/bin/python" scripts/python-fsspec-bench.py --saltblob "$CARGO_TARGET_DIR/release/saltblob" "$@"
fi
if [ "$mode" = reference ]; then
  exec "$venv/bin/python" scripts/python-reference.py --dir "$reference_dir" "$@"
fi

# The CLI, for the test of scripts/python-bench.py (skipped when it is not built: the suite's build step builds it).
saltblob_bin="$CARGO_TARGET_DIR/release/saltblob"
[ -x "$saltblob_bin" ] || saltblob_bin=

# From a scratch directory, so that the package imported is the installed one and nothing is left in the clone.
work=$(mktemp -d -t saltblob-py.XXXXXX)
trap 'rm -rf "$work"' EXIT
repo=$PWD
cd "$work"
echo "== python-tests: pytest tests/python${TEST_CQL:+ (Cassandra node $TEST_CQL)}"
# --basetemp in the scratch directory: the stores the tests make (a 256 MiB one among them) go with it.
SALTBLOB_BIN="$saltblob_bin" timeout 1200 "$venv/bin/python" -m pytest -p no:cacheprovider -c "$repo/tests/python/pytest.ini" \
  --rootdir "$repo/tests/python" --basetemp "$work/pytest" "$repo/tests/python" "$@"
