#!/usr/bin/env bash
# Installs the `saltblob` command: first what the build needs (scripts/prereqs.sh: a C/C++ toolchain and
# libclang-dev, with apt-get), then `cargo install --locked --path crates/saltblob-cli` in the project's build
# directory ($CARGO_TARGET_DIR, default ~/.cache/saltblob-target), so that RocksDB's C++ is compiled once per
# machine whichever script builds first. The binary goes to ~/.cargo/bin (on PATH after rustup's set-up).
#
#   scripts/install.sh [CARGO_INSTALL_ARGS...]     e.g. --root /usr/local (then /usr/local/bin/saltblob)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
saltblob_setup
cargo install --locked --path crates/saltblob-cli --target-dir "$CARGO_TARGET_DIR" "$@"
