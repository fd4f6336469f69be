#!/usr/bin/env bash
# Tests of the set-up's detection (scripts/prereqs.sh) against faked machines: a fake package query answers
# from a list of installed packages, a scratch root and PATH hold fake java binaries. Each case states which
# packages the set-up must ask for; the real machine's own packages do not matter, so a wrong predicate fails
# here even where the package happens to be installed.
#
#   scripts/test-setup.sh           run the cases, print one line each and "setup: N passed, N failed"
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/prereqs.sh

scratch=$(mktemp -d -t saltblob-setup.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
passed=0
failed=0

# A fake dpkg-query: answers `-W -f='${Status}' PKG` from $scratch/dpkg-db (lines "PKG STATUS..."), and like
# the real one fails with "no packages found" for a package it does not know.
mkdir -p "$scratch/bin"
cat >"$scratch/bin/dpkg-query" <<'EOF'
#!/usr/bin/env bash
pkg=${!#}
line=$(grep -m1 "^$pkg " "$FAKE_DPKG_DB") || { echo "dpkg-query: no packages found matching $pkg" >&2; exit 1; }
printf '%s' "${line#* }"
EOF
chmod +x "$scratch/bin/dpkg-query"
export SALTBLOB_DPKG_QUERY="$scratch/bin/dpkg-query" FAKE_DPKG_DB="$scratch/dpkg-db"

# A fake java binary at $1 that reports Java version $2 the way `java -XshowSettings:properties` does.
fake_java() {
  mkdir -p "$(dirname "$1")"
  printf '#!/bin/sh\necho "    java.specification.version = %s" >&2\n' "$2" >"$1"
  chmod +x "$1"
}

# The fresh machine of this project's kind: a C/C++ toolchain, Debian's Java 17 (which brings openssl, through
# ca-certificates) and Maven, systemd, and libclang-cpp14 (a look-alike of libclang) but neither libclang-dev nor
# libclang1-14 nor fiu-utils nor rclone nor chromium.
FRESH=(gcc g++ make maven libclang-cpp14 openjdk-17-jre-headless openssl systemd)

# machine PKG...: the fake package database holds exactly these packages as installed, plus some in other states.
machine() {
  {
    local p
    for p in "$@"; do echo "$p install ok installed"; done
    echo "libclang1-14 deinstall ok config-files"
    echo "libclang-14-dev unknown ok not-installed"
  } >"$FAKE_DPKG_DB"
}

# report NAME GOT WANT WHAT: one case's line, counted; WHAT says what GOT is ("asked for", "missing").
report() {
  if [ "$2" = "$3" ]; then
    echo "ok   $1"
    passed=$((passed + 1))
  else
    echo "FAIL $1: $4 '$2', expected '$3'"
    failed=$((failed + 1))
  fi
}

# expect NAME WANT GROUP...: prereq_missing for the groups must ask for exactly the packages WANT (space-separated).
expect() {
  local name=$1 want=$2 got
  shift 2
  got=$(prereq_missing "$@" 2>/dev/null | cut -f1 | sort | xargs)
  want=$(tr ' ' '\n' <<<"$want" | sort | xargs)
  report "$name" "$got" "$want" "asked for"
}

# Java: no JAVA_HOME, a PATH whose java is a fake, a scratch root with no /usr/lib/jvm unless a case adds one.
export SALTBLOB_PREREQ_ROOT="$scratch/root"
unset JAVA_HOME
fake_java "$scratch/java11/java" 11
fake_java "$scratch/java17/java" 17
PATH="$scratch/java17:$PATH"

machine "${FRESH[@]}"
expect "fresh machine (libclang-cpp14 only): the build asks for libclang-dev" "libclang-dev" build
expect "fresh machine: the tests ask for fiu-utils, rclone and chromium" "fiu-utils rclone chromium" test
expect "fresh machine: Cassandra needs nothing more" "" cassandra

machine "${FRESH[@]}" libclang1-14 libclang-common-14-dev
expect "libclang1-14 and clang's headers without libclang-dev: still asks for libclang-dev" "libclang-dev" build

machine "${FRESH[@]}" libclang-dev fiu-utils rclone chromium
expect "everything installed: asks for nothing" "" build test cassandra

# Each Debian prerequisite alone missing: exactly that one is asked for, by its group.
for entry in "${SALTBLOB_PREREQS[@]}"; do
  group=${entry%% *}
  pkg=${entry#* }
  pkg=${pkg%% *}
  others=()
  for p in "${FRESH[@]}" libclang-dev fiu-utils rclone chromium; do [ "$p" = "$pkg" ] || others+=("$p"); done
  machine "${others[@]}"
  expect "$pkg missing: the $group set-up asks for it" "$pkg" "$group"
  expect "$pkg missing: the other groups do not" "" $(printf '%s\n' build test cassandra | grep -vx "$group")
done

machine "${FRESH[@]}" libclang-dev fiu-utils rclone chromium
echo "gcc deinstall ok config-files" >>"$FAKE_DPKG_DB"
sed -i '/^gcc install/d' "$FAKE_DPKG_DB"
expect "a removed package (configuration files left) counts as missing" "gcc" build
echo "fiu-utils unknown ok not-installed" >>"$FAKE_DPKG_DB"
sed -i '/^fiu-utils install/d' "$FAKE_DPKG_DB"
expect "a package known to apt but not installed counts as missing" "fiu-utils" test

# rclone is decided by its package too: an `rclone` on PATH that no Debian package installed (a download, another
# version) is not what the tests were written against, and does not count.
mkdir -p "$scratch/rclone-bin"
printf '#!/bin/sh\necho "rclone v1.99.0"\n' >"$scratch/rclone-bin/rclone"
chmod +x "$scratch/rclone-bin/rclone"
machine "${FRESH[@]}" libclang-dev fiu-utils chromium
PATH="$scratch/rclone-bin:$PATH" expect "an rclone binary on PATH without the rclone package: asks for rclone" "rclone" test
echo "rclone install ok half-configured" >>"$FAKE_DPKG_DB"
expect "a half-configured rclone package counts as missing" "rclone" test

# The CPU features .cargo/config.toml turns on: read from the CPU's flags, and only on x86-64.
cpu_case() {
  local name=$1 arch=$2 flags=$3 want=$4 got
  printf 'processor\t: 0\n%s\n' "$flags" >"$scratch/cpuinfo"
  got=$(SALTBLOB_ARCH=$arch SALTBLOB_CPUINFO="$scratch/cpuinfo" prereq_cpu_missing)
  report "$name" "$got" "$want" "missing"
}
cpu_case "an x86-64 CPU with SSE4.2 and PCLMULQDQ: nothing missing" x86_64 \
  "flags		: fpu sse sse2 ssse3 sse4_1 sse4_2 pclmulqdq avx2" ""
cpu_case "an x86-64 CPU from before SSE4.2: both missing" x86_64 "flags		: fpu sse sse2 ssse3 sse4_1" \
  "sse4_2 pclmulqdq"
cpu_case "an x86-64 CPU with SSE4.2 but no PCLMULQDQ: that one missing" x86_64 \
  "flags		: fpu sse sse2 sse4_1 sse4_2 pclmulqdq_typo" "pclmulqdq"
cpu_case "no flags line: both missing" x86_64 "model name	: unknown" "sse4_2 pclmulqdq"
cpu_case "another architecture: nothing asked" aarch64 "Features	: fp asimd crc32" ""

# Java 17 is decided by running the candidates cassandra.sh would run.
machine "${FRESH[@]}" libclang-dev fiu-utils rclone chromium
PATH="$scratch/java11:$PATH" expect "only Java 11 on PATH: asks for openjdk-17-jre-headless" "openjdk-17-jre-headless" cassandra
PATH="$scratch/java11:$PATH" JAVA_HOME="$scratch/jdk17" expect "JAVA_HOME without a java: asks for it" \
  "openjdk-17-jre-headless" cassandra
fake_java "$scratch/jdk17/bin/java" 17
PATH="$scratch/java11:$PATH" JAVA_HOME="$scratch/jdk17" expect "Java 17 in JAVA_HOME: asks for nothing" "" cassandra
fake_java "$SALTBLOB_PREREQ_ROOT/usr/lib/jvm/java-17-openjdk-amd64/bin/java" 17
PATH="$scratch/java11:$PATH" expect "Debian's Java 17 beside a default Java 11: asks for nothing" "" cassandra

# What the set-up prints: one line per package it installs, saying why (a dry run installs nothing).
machine "${FRESH[@]}"
out=$(SALTBLOB_SETUP_DRY_RUN=1 prereq_ensure build test 2>&1)
if grep -qx "== installing libclang-dev (Debian package): libclang.so and clang's headers, which bindgen loads to generate RocksDB's bindings" <<<"$out" \
  && grep -q "^== installing fiu-utils (Debian package): " <<<"$out" \
  && grep -qx "== installing rclone (Debian package): rclone, a real S3 client the S3 server's tests run (tests/s3/test_rclone.py)" <<<"$out" \
  && grep -q "^== installing chromium (Debian package): " <<<"$out" \
  && [ "$(wc -l <<<"$out")" = 4 ]; then
  echo "ok   the set-up prints one line per package it installs, with the reason"
  passed=$((passed + 1))
else
  echo "FAIL the set-up's lines: $out"
  failed=$((failed + 1))
fi

# And the real machine, after the set-up of scripts/test.sh: nothing is missing.
unset SALTBLOB_DPKG_QUERY SALTBLOB_PREREQ_ROOT
PATH=${PATH#"$scratch/java17:"}
if [ "${1:-}" = --this-machine ]; then
  expect "this machine after its set-up: nothing missing" "" build test cassandra
fi

echo "setup: $passed passed, $failed failed"
[ "$failed" = 0 ]
