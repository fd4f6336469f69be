# Sourced by env.sh and cassandra.sh: what saltblob's scripts need from the machine, each prerequisite decided
# by exactly what its consumer uses, and the one place that installs them (Debian packages, with apt-get).
#
# A prerequisite is decided by Debian package state (`dpkg-query -W -f='${Status}' PKG` must say
# "install ok installed"), never by a file that merely looks like the one needed: a fresh machine has
# `libclang-cpp14` (libclang-cpp.so.14), which is not the libclang.so bindgen loads. Java is the exception: any
# Java 17 will do for Cassandra, so it is decided by running the candidates cassandra.sh would run.
#
# For the set-up tests (scripts/test-setup.sh) three variables replace the machine:
#   SALTBLOB_DPKG_QUERY   the package query to ask (default dpkg-query)
#   SALTBLOB_PREREQ_ROOT  prefix of the file-system paths looked at (default: none, the real root)
#   SALTBLOB_SETUP_DRY_RUN=1  print what would be installed, install nothing

# Every prerequisite: group, Debian package, why it is needed. The groups: build (any cargo build of saltblob),
# test (only the test suite), cassandra (scripts/cassandra.sh).
SALTBLOB_PREREQS=(
  "build gcc the C compiler (cc) that builds RocksDB's, zstd's and lz4's C sources"
  "build g++ the C++ compiler (c++) that builds RocksDB"
  "build make used by the build scripts of the C dependencies"
  "build libclang-dev libclang.so and clang's headers, which bindgen loads to generate RocksDB's bindings"
  "test fiu-utils fiu-run and fiu-ctrl, which inject write and fsync failures in the fault-injection test"
  "test rclone rclone, a real S3 client the S3 server's tests run (tests/s3/test_rclone.py)"
  "test chromium a real browser, whose pages use the S3 server through CORS (tests/s3/test_cors_browser.py)"
  "test systemd systemd-analyze, which verifies the systemd unit of docs/operations.md (scripts/check-docs.py)"
  "cassandra maven mvn, which fetches Cassandra's jars from Maven Central"
  "cassandra openssl the openssl tool, which signs the test nodes' TLS certificates and writes them as PEM"
)

# True if Debian package PKG is installed (not merely known, unpacked or removed with its configuration kept).
prereq_pkg_installed() {
  local status
  status=$("${SALTBLOB_DPKG_QUERY:-dpkg-query}" -W -f='${Status}' "$1" 2>/dev/null) || return 1
  [ "$status" = "install ok installed" ]
}

# The major Java version (11, 17, …) of the java binary $1, or 0.
prereq_java_major() {
  local v
  v=$("$1" -XshowSettings:properties -version 2>&1 | sed -n 's/^ *java\.specification\.version = //p')
  printf '%s' "${v:-0}"
}

# Prints the path of a Java 17 binary (JAVA_HOME's, the one on PATH, or Debian's), or returns 1.
prereq_find_java17() {
  local c
  for c in "${JAVA_HOME:+$JAVA_HOME/bin/java}" "$(command -v java || true)" \
    "${SALTBLOB_PREREQ_ROOT:-}"/usr/lib/jvm/java-17-openjdk-*/bin/java; do
    if [ -n "$c" ] && [ -x "$c" ] && [ "$(prereq_java_major "$c")" = 17 ]; then
      printf '%s' "$c"
      return 0
    fi
  done
  return 1
}

# Prints one line "PKG<TAB>why" for each missing prerequisite of the given groups.
prereq_missing() {
  local group entry g pkg why dpkg=1
  if ! command -v "${SALTBLOB_DPKG_QUERY:-dpkg-query}" >/dev/null 2>&1; then
    echo "warning: no dpkg-query (not a Debian system): the Debian packages ${SALTBLOB_PREREQS[*]%% *} are not checked" >&2
    dpkg=0
  fi
  for group in "$@"; do
    for entry in "${SALTBLOB_PREREQS[@]}"; do
      g=${entry%% *}
      pkg=${entry#* }
      why=${pkg#* }
      pkg=${pkg%% *}
      [ "$g" = "$group" ] && ((dpkg)) || continue
      prereq_pkg_installed "$pkg" || printf '%s\t%s\n' "$pkg" "$why"
    done
    if [ "$group" = cassandra ] && ! prereq_find_java17 >/dev/null; then
      printf '%s\t%s\n' openjdk-17-jre-headless "Java 17, which runs Cassandra 5.0 (no Java 17 on JAVA_HOME, PATH or /usr/lib/jvm)"
    fi
  done
}

# Installs the missing prerequisites of the given groups, one line each saying what and why.
# The CPU features .cargo/config.toml turns on for x86-64 builds (RocksDB's hardware CRC32C) that this CPU lacks,
# space-separated (nothing on other architectures). A binary built with them dies of SIGILL on a CPU without them,
# so the build set-up refuses first. SALTBLOB_CPUINFO and SALTBLOB_ARCH stand in for /proc/cpuinfo and `uname -m`
# in scripts/test-setup.sh.
prereq_cpu_missing() {
  [ "${SALTBLOB_ARCH:-$(uname -m)}" = x86_64 ] || return 0
  local flags f missing=()
  flags=$(grep -m1 '^flags' "${SALTBLOB_CPUINFO:-/proc/cpuinfo}" 2>/dev/null || true)
  for f in sse4_2 pclmulqdq; do
    grep -qw -- "$f" <<<"$flags" || missing+=("$f")
  done
  echo "${missing[*]}"
}

prereq_ensure() {
  local missing pkg why pkgs=()
  missing=$(prereq_missing "$@")
  [ -n "$missing" ] || return 0
  while IFS=$'\t' read -r pkg why; do
    echo "== installing $pkg (Debian package): $why"
    pkgs+=("$pkg")
  done <<<"$missing"
  [ "${SALTBLOB_SETUP_DRY_RUN:-0}" = 1 ] && return 0
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "error: apt-get not found: install ${pkgs[*]} (or their equivalents) yourself, then run this again" >&2
    return 1
  fi
  local sudo=()
  if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null 2>&1 || {
      echo "error: installing ${pkgs[*]} needs root or sudo" >&2
      return 1
    }
    sudo=(sudo)
  fi
  "${sudo[@]}" apt-get update -qq || {
    echo "error: apt-get update failed: check the network or the Debian mirror in /etc/apt" >&2
    return 1
  }
  if ! DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${pkgs[@]}" >/dev/null; then
    echo "error: apt-get install ${pkgs[*]} failed (see above)" >&2
    return 1
  fi
  # What was just installed must now pass the same checks, or the build would fail later and less clearly.
  missing=$(prereq_missing "$@")
  if [ -n "$missing" ]; then
    while IFS=$'\t' read -r pkg why; do
      echo "error: $pkg is still missing after apt-get install" >&2
    done <<<"$missing"
    return 1
  fi
}
