#!/usr/bin/env python3
# The device's own isolation (docs/bench/journal/isolation.md, issue 23): a paced mix of 4 KiB appends +
# fdatasync (a stand-in for
# a write-ahead log's commits) and 4 KiB O_DIRECT random reads, half each, timed from when each was due, first
# alone and then beside QD threads writing 1 MiB O_DIRECT requests into pre-allocated 4 GiB files.
# Usage: paced-small-beside-writers.py DIR RATE SECONDS QD [direct|buffered]
import os, mmap, time, threading, random, sys
D = sys.argv[1]; RATE = float(sys.argv[2]); SECS = float(sys.argv[3]); QD = int(sys.argv[4]); MODE = sys.argv[5] if len(sys.argv)>5 else 'direct'
os.makedirs(D, exist_ok=True)
def aligned(n):
    m = mmap.mmap(-1, n); m.write(os.urandom(n)); return m
# read file: 1 GiB prewritten
rf = os.path.join(D, 'read.dat')
if not os.path.exists(rf) or os.path.getsize(rf) < (1<<30):
    fd = os.open(rf, os.O_CREAT|os.O_WRONLY|os.O_DIRECT, 0o644); b = aligned(1<<20)
    for i in range(1024): os.pwrite(fd, b, i<<20)
    os.fsync(fd); os.close(fd)
wal = os.open(os.path.join(D, 'wal.log'), os.O_CREAT|os.O_WRONLY|os.O_TRUNC, 0o644)
rfd = os.open(rf, os.O_RDONLY|os.O_DIRECT)
rbuf = aligned(4096); wbuf = os.urandom(4096)
stop = threading.Event(); bulk_bytes = [0]
def bulk(k):
    path = os.path.join(D, f'bulk{k}.dat')
    fd = os.open(path, os.O_CREAT|os.O_WRONLY|os.O_TRUNC|(os.O_DIRECT if MODE=='direct' else 0), 0o644)
    os.posix_fallocate(fd, 0, 4<<30); b = aligned(1<<20); off = 0
    while not stop.is_set():
        os.pwrite(fd, b, off); off += 1<<20; bulk_bytes[0] += 1<<20
        if off >= (4<<30): off = 0
        if MODE != 'direct' and off % (64<<20) == 0: os.fdatasync(fd)
    os.close(fd); os.unlink(path)
def paced(secs):
    lat = {'put': [], 'get': []}; lock = threading.Lock(); t0 = time.monotonic(); n = int(secs*RATE)
    def one(i, due):
        now = time.monotonic()
        if due > now: time.sleep(due-now)
        if i % 2:
            os.write(wal, wbuf); os.fdatasync(wal); k = 'put'
        else:
            os.preadv(rfd, [rbuf], random.randrange(1<<18)*4096); k = 'get'
        with lock: lat[k].append((time.monotonic()-due)*1000)
    # a pool of workers taking ops in order
    idx = [0]; il = threading.Lock()
    def worker():
        while True:
            with il:
                i = idx[0]; idx[0] += 1
            if i >= n: return
            one(i, t0 + i/RATE)
    ws = [threading.Thread(target=worker) for _ in range(16)]
    [w.start() for w in ws]; [w.join() for w in ws]
    return lat
def pct(v, p): v = sorted(v); return v[min(len(v)-1, int(p*len(v)))]
def show(name, lat):
    allv = lat['put'] + lat['get']
    print(f"{name}: p50={pct(allv,.5):.2f} p99={pct(allv,.99):.1f} p999={pct(allv,.999):.1f} | put p50={pct(lat['put'],.5):.2f} p99={pct(lat['put'],.99):.1f} | get p50={pct(lat['get'],.5):.2f} p99={pct(lat['get'],.99):.1f}", flush=True)
a = paced(SECS); show('alone', a)
ts = [threading.Thread(target=bulk, args=(k,)) for k in range(QD)]; [t.start() for t in ts]
time.sleep(2); b0 = bulk_bytes[0]; t1 = time.monotonic()
u = paced(SECS); el = time.monotonic()-t1; mb = (bulk_bytes[0]-b0)/el/1e6
stop.set(); [t.join() for t in ts]
show(f'beside bulk QD{QD} {MODE} {mb:.0f} MB/s', u)
os.close(wal); os.close(rfd)
