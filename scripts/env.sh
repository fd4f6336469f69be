# Sourced by the other scripts: installs what building saltblob needs on a fresh Debian machine and sets a
# stable build directory outside the clone, so that RocksDB's C++ build (~14 minutes on 2 cores) is done once
# per machine, not once per clone.
set -euo pipefail

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/saltblob-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"

saltblob_setup() {
  local need=()
  command -v cc >/dev/null 2>&1 || need+=(gcc)
  command -v c++ >/dev/null 2>&1 || need+=(g++)
  command -v make >/dev/null 2>&1 || need+=(make)
  # The rocksdb crate generates its bindings with bindgen, which needs libclang.
  if ! ls /usr/lib/llvm-*/lib/libclang*.so* >/dev/null 2>&1 && ! ls /usr/lib/x86_64-linux-gnu/libclang*.so* >/dev/null 2>&1; then
    need+=(libclang-dev)
  fi
  if ((${#need[@]})); then
    echo "== installing ${need[*]} (Debian packages)"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    echo "error: cargo not found; install Rust with rustup (https://rustup.rs), then run this again" >&2
    exit 1
  fi
}

# What only the test suite needs: libfiu's fiu-run and fiu-ctrl (Debian's fiu-utils), which inject write and
# fsync failures into a running process for the fault-injection test.
saltblob_test_setup() {
  if ! command -v fiu-run >/dev/null 2>&1 || ! command -v fiu-ctrl >/dev/null 2>&1; then
    echo "== installing fiu-utils (Debian package)"
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq fiu-utils >/dev/null
  fi
}
