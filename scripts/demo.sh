#!/usr/bin/env bash
# The main job on the embedded default: stores and reads back a mixed-size set of blobs (bytes to 60 MiB) in
# ./saltblob-data, verifies every digest and prints each layout and latency.
cd "$(dirname "$0")/.."
source scripts/env.sh
saltblob_setup
cargo build --release --locked -p saltblob-cli
exec "$CARGO_TARGET_DIR/release/saltblob" demo "$@"
