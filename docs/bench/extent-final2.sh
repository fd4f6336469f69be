#!/bin/bash
# Issue 22, final measurement of the merged branch: before = current main (ca6585d, /tmp/extent-main-bin), after = the
# merged wt-extent (/tmp/extent-after-bin). Interleaved before/after pairs (before first in odd pairs), then --mixed
# pairs, then the threshold runs. Output in /tmp/extent-runs/final2.
cd /tmp/extent-runs/final2
BB=/tmp/extent-main-bin; BA=/tmp/extent-after-bin
PAIRS=${PAIRS:-4}
one() { # VERSION N
  local v=$1 n=$2 B; [ $v = before ] && B=$BB || B=$BA
  local extra=""; [ $v = after ] && extra="--stream-mb 1024"
  echo "$(date -u +%T) pair $n $v load $(cut -d' ' -f1-3 /proc/loadavg)" >> log.txt
  rm -rf /tmp/extent-pb
  timeout 1200 $B --store rocksdb:///tmp/extent-pb --quiet bench --count 10 --large-mb 60 --small-kb 64 $extra --json pair$n-$v.json > pair$n-$v.txt 2>&1
  rm -rf /tmp/extent-pb
  SALTBLOB_REPORT_PEAK_RSS=1 /usr/bin/time -f "time %U %S %e" $B --store rocksdb:///tmp/extent-pb --quiet put stream - < /tmp/extent-1g > /dev/null 2> stream$n-$v.txt
  du -sb /tmp/extent-pb >> stream$n-$v.txt
  rm -rf /tmp/extent-pb
}
for n in $(seq 1 $PAIRS); do
  if [ $((n % 2)) = 1 ]; then one before $n; one after $n; else one after $n; one before $n; fi
done
for n in 1 2; do
  if [ $n = 1 ]; then order="before after"; else order="after before"; fi
  for v in $order; do
    [ $v = before ] && B=$BB || B=$BA
    echo "$(date -u +%T) mixed $n $v load $(cut -d' ' -f1-3 /proc/loadavg)" >> log.txt
    rm -rf /tmp/extent-pm
    timeout 1200 $B --store rocksdb:///tmp/extent-pm --quiet bench --count 5 --large-mb 60 --small-kb 64 --mixed 10 --no-probe --json mixed$n-$v.json > mixed$n-$v.txt 2>&1
    rm -rf /tmp/extent-pm
  done
done
for mb in 4 8 16; do
  for t in 0 off; do
    echo "$(date -u +%T) threshold $mb $t load $(cut -d' ' -f1-3 /proc/loadavg)" >> log.txt
    rm -rf /tmp/extent-pt
    timeout 1200 $BA --store "rocksdb:///tmp/extent-pt?extent_min_bytes=$t" --quiet bench --count 10 --large-mb $mb --small-kb 64 --no-probe --json th-$mb-$t.json > th-$mb-$t.txt 2>&1
    rm -rf /tmp/extent-pt
  done
done
echo "$(date -u +%T) done" >> log.txt
