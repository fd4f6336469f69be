"""Summary of --mixed runs (ARM-N.json or ARM-N.mixed.json in DIR). Usage: mixsum.py DIR"""
import json, glob, os, re, statistics, sys
d = sys.argv[1]
rows = {}
for f in sorted(glob.glob(f'{d}/*.json')):
    if f.endswith('.bench.json'):
        continue
    name = os.path.basename(f)[:-5].replace('.mixed', '')
    arm, n = name.rsplit('-', 1)
    r = json.load(open(f)); p = {x['name']: x for x in r['phases']}
    sa, su = p['small_alone']['latency_ms']['p99'], p['small_under_load']['latency_ms']['p99']
    s50a, s50u = p['small_alone']['latency_ms']['p50'], p['small_under_load']['latency_ms']['p50']
    ba, bu = p['bulk_alone']['throughput_mib_s'], p['bulk_under_load']['throughput_mib_s']
    lw = p.get('large_write', {}).get('throughput_mib_s'); lr = p.get('large_read', {}).get('throughput_mib_s')
    sw = p.get('small_write', {}).get('latency_ms', {}).get('p99')
    rows.setdefault(arm, []).append((n, sa, su, su / sa, ba, bu, bu / ba, s50a, s50u, lw, lr, sw))
print('| arm | run | small P50/P99 alone ms | small P50/P99 under load ms | P99 ratio | bulk MiB/s alone → under load | ratio | large put / get MiB/s |')
print('|---|---|---|---|---|---|---|---|')
for arm in ['before', 'prefix', 'after', 'afteroff']:
    for (n, sa, su, sr, ba, bu, br, s50a, s50u, lw, lr, sw) in rows.get(arm, []):
        print(f'| {arm} | {n} | {s50a:.1f} / {sa:.1f} | {s50u:.1f} / {su:.1f} | {sr:.2f} | {ba:.0f} → {bu:.0f} | {br:.2f} | {lw:.0f} / {lr:.0f} |')
print()
for arm in ['before', 'prefix', 'after', 'afteroff']:
    rs = rows.get(arm, [])
    if rs:
        med = lambda i: statistics.median(r[i] for r in rs)
        print(f'{arm}: n={len(rs)} small P99 alone {med(1):.1f} (range {min(r[1] for r in rs):.1f}-{max(r[1] for r in rs):.1f}), under load {med(2):.1f} ({min(r[2] for r in rs):.1f}-{max(r[2] for r in rs):.1f}), ratio {med(3):.2f}; bulk alone {med(4):.0f}, loaded {med(5):.0f}, ratio {med(6):.2f}')
