#!/bin/bash
# Plain bench, interleaved arms: prefix (extents before this follow-up), after (this follow-up), afterc8 (this
# follow-up, scheduler limit at least 8: does the adaptive limit hold large gets back?). Rotating order per round.
cd /tmp/x2/puts
ROUNDS=${ROUNDS:-3}
arm() {
  local a=$1 n=$2 B Q=""
  case $a in prefix) B=/tmp/extent-after-bin;; after) B=/tmp/x2/saltblob-after;; afterc8) B=/tmp/x2/saltblob-after; Q="?concurrency=8-64";; esac
  echo "$(date -u +%T) $a $n load $(cut -d' ' -f1-3 /proc/loadavg)" >> log.txt
  rm -rf /tmp/x2/pb
  timeout 900 $B --store "rocksdb:///tmp/x2/pb$Q" --quiet bench --count 10 --large-mb 60 --small-kb 64 --json $a-$n.json > $a-$n.txt 2>&1
  rm -rf /tmp/x2/pb
}
arms=(prefix after afterc8)
for n in $(seq 1 $ROUNDS); do
  for k in 0 1 2; do arm ${arms[$(( (k + n - 1) % 3 ))]} $n; done
done
echo "$(date -u +%T) done" >> log.txt
