#!/bin/bash
# Interleaved before/after runs of the crash-loop child's load (15 s, then SIGKILL); per run: awaiting reclaim
# (fsck), disk MB, completed background gc passes, versions they reclaimed, completed puts.
PAIRS=${PAIRS:-3}; SECS=${SECS:-15}
for i in $(seq 1 $PAIRS); do
  for side in before after; do
    name=$side-$i
    T=/tmp/x2/child-$side /tmp/x2/child.sh $name "" $SECS > /tmp/x2/$name.res 2>&1
    D=/tmp/x2/$name
    aw=$(grep -o "awaiting reclaim [0-9]*" /tmp/x2/$name.res | grep -o "[0-9]*$")
    disk=$(grep -o "disk MB [0-9]*" /tmp/x2/$name.res | grep -o "[0-9]*$")
    passes=$(grep -c "background gc" $D/log.txt)
    vers=$(sed 's/\x1b\[[0-9;]*m//g' $D/log.txt | grep -o "versions: [0-9]*" | awk '{s+=$2} END {print s+0}')
    puts=$(python3 -c "
import json
inv={}
n=0
for l in open('$D/history.jsonl'):
    try: e=json.loads(l)
    except Exception: continue
    k=(e['op']['client'],e['op']['seq'])
    if e['ev']=='invoke': inv[k]=e['kind']
    elif e['ev']=='complete' and 'ok' in e['outcome'] and 'put' in str(list(inv.get(k,{}).keys())): n+=1
print(n)")
    echo "$name awaiting=$aw disk_mb=$disk gc_passes=$passes reclaimed=$vers puts=$puts load=$(cut -d' ' -f1 /proc/loadavg)"
    rm -rf $D/store
  done
done
