#!/usr/bin/env python3
# Samples, every 0.5 s, the CPU time and run-queue wait (/proc/PID/task/TID/schedstat) of every thread of the
# processes whose command line contains one of PATTERNs, summed by thread name (trailing digits dropped), one
# JSON line per sample: {"t": epoch s, "log": size of LOGFILE, "r": {"PATTERN|NAME": [run ns, wait ns]}}.
# Used for BENCHMARKS.md, "Single-node Cassandra: where the tail is made"; stop it with SIGTERM.
#   thread-waits.py OUT LOGFILE PATTERN...
import os, sys, time, re, json
out, logf, pats = sys.argv[1], sys.argv[2], sys.argv[3:]
def pids():
    r = {}
    for p in os.listdir('/proc'):
        if not p.isdigit(): continue
        try: cmd = open(f'/proc/{p}/cmdline','rb').read().replace(b'\0',b' ').decode()
        except Exception: continue
        for pat in pats:
            if pat in cmd and int(p) != os.getpid(): r[int(p)] = pat
    return r
def cls(name):
    return re.sub(r'[-#:_ ]?\d+$', '', name.strip())
prev = {}
f = open(out, 'w')
while True:
    t = time.time(); rows = {}
    for pid, pat in pids().items():
        try: tids = os.listdir(f'/proc/{pid}/task')
        except Exception: continue
        for tid in tids:
            try:
                st = open(f'/proc/{pid}/task/{tid}/stat').read()
                name = st[st.index('(')+1:st.rindex(')')]
                ss = open(f'/proc/{pid}/task/{tid}/schedstat').read().split()
            except Exception: continue
            run, wait = int(ss[0]), int(ss[1])
            key = (pid, tid)
            if key in prev:
                pr, pw = prev[key]
                c = (pat, cls(name))
                a = rows.setdefault(c, [0,0])
                a[0] += run-pr; a[1] += wait-pw
            prev[key] = (run, wait)
    try: ls = os.path.getsize(logf)
    except Exception: ls = 0
    f.write(json.dumps({'t': t, 'log': ls, 'r': {f'{k[0]}|{k[1]}': v for k, v in rows.items() if v[0] or v[1]}})+'\n'); f.flush()
    time.sleep(max(0, 0.5 - (time.time()-t)))
