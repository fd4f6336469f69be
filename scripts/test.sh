#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit, property, conformance, CLI end-to-end and crash tests.
# Installs what it needs first. Every step is bounded in time.
cd "$(dirname "$0")/.."
source scripts/env.sh
saltblob_setup

step() {
  local name=$1
  shift
  echo "== $name: $*"
  local t0=$SECONDS
  "$@"
  echo "== $name passed in $((SECONDS - t0)) s"
}

step format cargo fmt --all -- --check
# One profile (release) for lints, tests and the CLI, so that RocksDB is compiled once.
step lint timeout 3600 cargo clippy --release --locked --workspace --all-targets -- -D warnings
step build timeout 3600 cargo build --release --locked --workspace --all-targets
step tests timeout 1800 cargo test --release --locked --workspace
