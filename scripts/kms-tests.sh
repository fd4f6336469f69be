#!/usr/bin/env bash
# The aws-kms key provider against a real KMS API: moto (from PyPI, pinned in tests/kms/requirements.txt, in a
# virtual environment reused while that file is unchanged) serves AWS KMS on two free loopback ports, one over
# HTTP and one over HTTPS with a certificate of a CA made here (openssl); the provider's integration tests
# (crates/saltblob-kms/tests/integration) run against them, then the CLI seals, shows and reads a blob of an
# embedded store through the first, and boto3 puts and gets objects with SSE-KMS through `saltblob serve` on such
# a store (tests/kms, pytest). Each emulator gets at most 60 s to answer; both are stopped on exit.
#
#   scripts/kms-tests.sh [-- TEST_BINARY_ARGS...]
#
# Environment: SALTBLOB_BIN (default $CARGO_TARGET_DIR/release/saltblob), SALTBLOB_CACHE (where the virtual
# environment venv-kms lives; default ~/.cache/saltblob).
#
# moto 5.2.5 serves DisableKey, EnableKey and ScheduleKeyDeletion but still decrypts with a disabled key; the
# provider asks DescribeKey before each use and refuses a key that is not Enabled, which is what the revocation
# tests see here (AWS KMS refuses such a key itself too).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
[ "${1:-}" = -- ] && shift

# openssl (the test Cassandra's group of Debian packages) makes the TLS emulator's certificate.
saltblob_test_setup
venv=${SALTBLOB_CACHE:-$HOME/.cache/saltblob}/venv-kms
saltblob_venv kms "$venv" tests/kms/requirements.txt "python -c 'import moto, flask, flask_cors, pytest' && command -v moto_server"

bin=${SALTBLOB_BIN:-$CARGO_TARGET_DIR/release/saltblob}
work=$(mktemp -d -t saltblob-kms.XXXXXX)
pids=()
# shellcheck disable=SC2317 # run by the EXIT trap
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    saltblob_stop_pid "$pid" 10
  done
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM
trap 'exit 130' INT

# Starts moto_server on a free loopback port with the extra arguments given, records its pid in $pids, and waits
# at most 60 s for it to answer on scheme $1 (with CA file $2 for https); sets $started to its endpoint.
start_moto() {
  local scheme=$1 ca=$2 port endpoint
  shift 2
  port=$("$venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  endpoint=$scheme://127.0.0.1:$port
  "$venv/bin/moto_server" -H 127.0.0.1 -p "$port" "$@" >>"$work/moto.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 1 120); do
    if "$venv/bin/python" -c "import ssl, sys, urllib.request
urllib.request.urlopen('$endpoint/moto-api/', timeout=2, context=ssl.create_default_context(cafile='$ca') if '$ca' else None)" 2>/dev/null; then
      started=$endpoint
      return 0
    fi
    kill -0 "${pids[-1]}" 2>/dev/null || break
    sleep 0.5
  done
  tail -n 30 "$work/moto.log" >&2
  echo "error: the KMS emulator (moto_server) did not answer on $endpoint within 60 s (its log above)" >&2
  return 1
}

# A CA and a certificate of it for localhost and 127.0.0.1, for the emulator that speaks TLS.
openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=saltblob KMS test CA" \
  -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" -keyout "$work/kms.key" -out "$work/kms.csr" 2>/dev/null
printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >"$work/san.ext"
openssl x509 -req -in "$work/kms.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" -CAcreateserial -days 2 \
  -extfile "$work/san.ext" -out "$work/kms.pem" 2>/dev/null

start_moto http ""
endpoint=$started
start_moto https "$work/ca.pem" --ssl-cert "$work/kms.pem" --ssl-key "$work/kms.key"
tls_endpoint=$started
echo "== kms: moto $("$venv/bin/python" -c 'import moto; print(moto.__version__)') serves KMS on $endpoint and $tls_endpoint"

export TEST_KMS_ENDPOINT=$endpoint TEST_KMS_TLS_ENDPOINT=$tls_endpoint TEST_KMS_CA=$work/ca.pem
export AWS_ACCESS_KEY_ID=saltblob-test AWS_SECRET_ACCESS_KEY=saltblob-test-secret
unset AWS_SESSION_TOKEN AWS_PROFILE
# The workspace's build, as scripts/test.sh's build step makes it (a no-op after it; on its own, it makes the
# binary the CLI and server tests below run): built for one package (-p), the shared crates would be compiled
# again with that package's features.
[ -n "${SALTBLOB_BIN:-}" ] || cargo build --release --locked --workspace --all-targets
# The provider's tests (module aws_kms of saltblob-kms's integration tests), from the workspace's build: every
# crate's integration binary runs with the filter, and only saltblob-kms's has tests that match it.
cargo test --release --locked --workspace --test integration -- --include-ignored aws_kms:: "$@"

# The CLI through the provider: a key made in KMS, a store URL naming it, put / head / get / rekey.
key=$("$venv/bin/python" - "$endpoint" <<'PY'
import sys, boto3
kms = boto3.client("kms", endpoint_url=sys.argv[1], region_name="us-east-1")
print(kms.create_key(Description="saltblob CLI test")["KeyMetadata"]["KeyId"])
PY
)
store="rocksdb://$work/store?encryption=aws-kms&encryption_key=$key&kms_endpoint=$endpoint"
head -c 3000000 /dev/urandom >"$work/in"
"$bin" put --store "$store" cli/blob "$work/in" >/dev/null
shown=$("$bin" head --store "$store" cli/blob)
if ! grep -q "aws-kms" <<<"$shown" || ! grep -q "$key" <<<"$shown"; then
  echo "$shown" >&2
  echo "error: saltblob head does not show the blob sealed under aws-kms key $key" >&2
  exit 1
fi
"$bin" get --store "$store" cli/blob -o "$work/out"
cmp "$work/in" "$work/out"
"$bin" rekey --store "$store" --prefix cli/ >/dev/null
echo "== kms: the CLI sealed, showed, read back and rekeyed a 3 MB blob under $key"

# The S3 server's SSE-KMS on such a store, with boto3 (tests/kms/test_s3_sse_kms.py).
env SALTBLOB_BIN="$(realpath "$bin")" "$venv/bin/python" -m pytest tests/kms -v -rP -p no:cacheprovider --basetemp "$work/pytest"
