#!/bin/bash
# usage: child.sh NAME EXTRA SECONDS
T=${T:-/tmp/x2/child-after}
B=/root/.cache/saltblob-target-extent/release/saltblob
D=/tmp/x2/$1; rm -rf $D; mkdir -p $D
XX_EXTRA="$2" XX_LOG=1 SALTBLOB_CRASH_CHILD=$D $T --exact crash_loop::crash_loop_child --ignored --test-threads=1 > $D/out.txt 2> $D/log.txt &
P=$!
sleep $3
kill -9 $P; wait $P 2>/dev/null
du -sm $D/store | cut -f1 | sed 's/^/disk MB /'
$B fsck --store rocksdb://$D/store --intent-lease 1s -q 2>&1 | tail -1
