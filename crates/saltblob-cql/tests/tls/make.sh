#!/usr/bin/env bash
# Regenerates the TLS test fixtures of this directory (test-only keys; nothing trusts them): a CA, a client
# certificate it signed with its key, and a key of no certificate. Valid for 100 years.
set -euo pipefail
cd "$(dirname "$0")"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes)
openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.pem -days 36500 -subj "/CN=saltblob fixture CA" 2>/dev/null
openssl req -new "${ec[@]}" -keyout client.key -out client.csr -subj "/CN=saltblob fixture client" 2>/dev/null
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' >client.ext
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 36500 -extfile client.ext \
  -out client.pem 2>/dev/null
openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out other.key
rm -f ca.key ca.srl client.csr client.ext
