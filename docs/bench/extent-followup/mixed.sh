#!/bin/bash
# --mixed isolation, interleaved arms: before (main before extents), prefix (extents, before this follow-up),
# after (this follow-up), afteroff (this follow-up with extent_min_bytes=off). Rotating order per round.
cd /tmp/x2/mixed
ROUNDS=${ROUNDS:-2}
arm() {
  local a=$1 n=$2 B Q=""
  case $a in before) B=/tmp/extent-main-bin;; prefix) B=/tmp/extent-after-bin;; after) B=/tmp/x2/saltblob-after;; afteroff) B=/tmp/x2/saltblob-after; Q="?extent_min_bytes=off";; esac
  echo "$(date -u +%T) $a $n load $(cut -d' ' -f1-3 /proc/loadavg)" >> log.txt
  rm -rf /tmp/x2/pm
  timeout 900 $B --store "rocksdb:///tmp/x2/pm$Q" --quiet bench --count 5 --large-mb 60 --small-kb 64 --mixed 10 --no-probe --json $a-$n.json > $a-$n.txt 2>&1
  rm -rf /tmp/x2/pm
}
arms=(before prefix after afteroff)
for n in $(seq 1 $ROUNDS); do
  for k in 0 1 2 3; do arm ${arms[$(( (k + n - 1) % 4 ))]} $n; done
done
echo "$(date -u +%T) done" >> log.txt
