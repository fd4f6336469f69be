# Sourced by the other scripts: installs what building saltblob needs on a fresh Debian machine (see
# prereqs.sh) and sets a stable build directory outside the clone, so that RocksDB's C++ build (~14 minutes on
# 2 cores) is done once per machine, not once per clone.
set -euo pipefail

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/saltblob-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

source "$(dirname "${BASH_SOURCE[0]}")/prereqs.sh"

# What any build needs: the C/C++ toolchain and libclang-dev for RocksDB, and cargo.
saltblob_setup() {
  local cpu_missing
  cpu_missing=$(prereq_cpu_missing)
  if [ -n "$cpu_missing" ]; then
    echo "error: this CPU lacks $cpu_missing, which .cargo/config.toml turns on for x86-64 (RocksDB's hardware CRC32C);" \
      "to build for it, delete the rustflags line there" >&2
    exit 1
  fi
  prereq_ensure build
  if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo not found; install Rust with rustup (https://rustup.rs), then run this again" >&2
    exit 1
  fi
}

# What only the test suite needs: libfiu's tools for the fault-injection test, and Java 17 and Maven for the
# test Cassandra (scripts/cassandra.sh checks the same again when run on its own).
saltblob_test_setup() {
  prereq_ensure test cassandra
}

# Stops process $1 if it runs: SIGTERM, then SIGKILL once it has not exited after ${2:-30} seconds.
saltblob_stop_pid() {
  local pid=$1 wait_s=${2:-30}
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 $((wait_s * 5))); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.2
  done
  kill -KILL "$pid" 2>/dev/null || true
}

# Prints the saltblob binary a script runs, as an absolute path: $SALTBLOB_BIN, else the build's
# ($CARGO_TARGET_DIR/release/saltblob). Exits 2, saying how to build it, when there is none.
saltblob_binary() {
  local bin=${SALTBLOB_BIN:-$CARGO_TARGET_DIR/release/saltblob}
  if [ ! -x "$bin" ]; then
    echo "error: no saltblob binary at $bin: build it (cargo build --release --locked -p saltblob-cli) or set SALTBLOB_BIN" >&2
    exit 2
  fi
  realpath "$bin"
}

# Splits a script's "[STORE_URL] [-- ARGS...]": sets store_url to STORE_URL (empty when not given) and the array
# rest_args to ARGS. The caller continues with: set -- "${rest_args[@]}"
saltblob_store_and_args() {
  store_url=
  if [ $# -gt 0 ] && [ "$1" != -- ]; then
    store_url=$1
    shift
  fi
  [ "${1:-}" = -- ] && shift
  rest_args=("$@")
}

# Makes the virtual environment $2 from the pinned requirements file $3, or reuses it when it was made from this
# very file and the check $4 (a shell command run with the environment's bin first on PATH) passes. $1 names the
# caller in what it prints.
saltblob_venv() {
  local label=$1 venv=$2 requirements=$3 check=$4
  if [ -x "$venv/bin/python" ] && cmp -s "$venv/.saltblob-requirements" "$requirements" &&
    PATH="$venv/bin:$PATH" sh -c "$check" >/dev/null 2>&1; then
    echo "== $label: virtual environment $venv is up to date"
    return 0
  fi
  if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
    echo "error: $(command -v python3) cannot create a virtual environment (no ensurepip); on Debian install python3-venv" >&2
    exit 1
  fi
  echo "== $label: creating $venv with $(python3 --version) and the packages of $requirements"
  rm -rf "$venv"
  python3 -m venv "$venv"
  timeout 600 "$venv/bin/pip" install --quiet --disable-pip-version-check --no-input -r "$requirements"
  cp "$requirements" "$venv/.saltblob-requirements"
}
