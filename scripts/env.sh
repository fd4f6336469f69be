# Sourced by the other scripts: installs what building saltblob needs on a fresh Debian machine (see
# prereqs.sh) and sets a stable build directory outside the clone, so that RocksDB's C++ build (~14 minutes on
# 2 cores) is done once per machine, not once per clone.
set -euo pipefail

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/saltblob-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

source "$(dirname "${BASH_SOURCE[0]}")/prereqs.sh"

# What any build needs: the C/C++ toolchain and libclang-dev for RocksDB, and cargo.
saltblob_setup() {
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
