#!/usr/bin/env python3
"""Per-thread CPU time and run-queue wait of running processes, from /proc/PID/task/TID/schedstat.

    thread-waits.py sample OUT PATTERN...   every 0.5 s until SIGTERM, for every process whose command line
                                            contains a PATTERN, append one JSON line to OUT:
                                            {"t": epoch s, "r": {"PATTERN|THREAD": [run ns, wait ns]}}, the
                                            growth since the last sample summed over threads of one name
                                            (trailing digits dropped: MutationStage-3 -> MutationStage)
    thread-waits.py sum OUT FROM-TO...      per window (seconds after the first sample), cores used and
                                            seconds of run-queue wait per second, by thread name

Used for docs/bench/journal/isolation.md, "Single-node Cassandra: where the tail is made": the windows were the
paced phases,
whose bounds show as the bench's wake-up probe thread (bench-wake-prob) starting and stopping.
"""
import json
import os
import re
import sys
import time


def sample(out, patterns):
    prev = {}
    with open(out, "w") as f:
        while True:
            t = time.time()
            rows = {}
            for pid, pattern in matching(patterns).items():
                try:
                    tids = os.listdir(f"/proc/{pid}/task")
                except OSError:
                    continue
                for tid in tids:
                    try:
                        stat = open(f"/proc/{pid}/task/{tid}/stat").read()
                        run, wait = map(int, open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[:2])
                    except (OSError, ValueError):
                        continue
                    name = re.sub(r"[-#:_ ]?\d+$", "", stat[stat.index("(") + 1 : stat.rindex(")")].strip())
                    if (pid, tid) in prev:
                        acc = rows.setdefault(f"{pattern}|{name}", [0, 0])
                        acc[0] += run - prev[pid, tid][0]
                        acc[1] += wait - prev[pid, tid][1]
                    prev[pid, tid] = (run, wait)
            f.write(json.dumps({"t": t, "r": {k: v for k, v in rows.items() if any(v)}}) + "\n")
            f.flush()
            time.sleep(max(0.0, 0.5 - (time.time() - t)))


def matching(patterns):
    found = {}
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{p}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        for pattern in patterns:
            if pattern in cmd and int(p) != os.getpid():
                found[int(p)] = pattern
    return found


def summarize(path, windows):
    rows = [json.loads(line) for line in open(path)]
    t0 = rows[0]["t"]
    sums = []
    for a, b in windows:
        acc = {}
        for r in rows:
            if a < r["t"] - t0 <= b:
                for k, (run, wait) in r["r"].items():
                    x = acc.setdefault(k, [0, 0])
                    x[0] += run
                    x[1] += wait
        sums.append({k: (run / 1e9 / (b - a), wait / 1e9 / (b - a)) for k, (run, wait) in acc.items()})
    cell = lambda v: f"{v[0]:6.3f}/{v[1]:6.3f}"
    total = [tuple(map(sum, zip(*s.values()))) if s else (0, 0) for s in sums]
    print(f"{'TOTAL (cores / wait s per s)':45s}" + " ".join(map(cell, total)))
    for k in sorted(set().union(*sums), key=lambda k: -sums[-1].get(k, (0, 0))[0]):
        values = [s.get(k, (0, 0)) for s in sums]
        if max(v[0] for v in values) >= 0.004:
            print(f"{k[-45:]:45s}" + " ".join(map(cell, values)))


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "sample":
        sample(sys.argv[2], sys.argv[3:])
    elif len(sys.argv) >= 4 and sys.argv[1] == "sum":
        summarize(sys.argv[2], [tuple(map(float, w.split("-"))) for w in sys.argv[3:]])
    else:
        sys.exit(__doc__)
