#!/usr/bin/env python3
# A paced 64 KiB append + fdatasync loop (260/s, a stand-in for a write-ahead log) beside a 1 MiB O_DIRECT writer
# (docs/bench/journal/isolation.md, issue 23). Usage: fsync-beside-writer.py MODE SYNC_EVERY_MIB SECONDS [MIB_S]
#   MODE overwrite: the writer writes over the blocks of /tmp/fs/big.dat, written already (make it first:
#                   dd if=/dev/zero of=/tmp/fs/big.dat bs=1M count=4096 oflag=direct);
#   MODE new:       the writer writes new 60 MiB files, each pre-allocated (posix_fallocate: blocks allocated
#                   unwritten, as a new extent file's) and fdatasynced at its end;
#   SYNC_EVERY_MIB: the writer also fdatasyncs every so many MiB (0: no writer at all);
#   MIB_S:          the writer's pace (0 or absent: unthrottled).
# Prints the writer's MiB/s and the loop's latency percentiles in ms, each timed from when it was due.
import mmap, os, sys, threading, time

mode, sync_every, dur = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
mib_s = float(sys.argv[4]) if len(sys.argv) > 4 else 0.0
rate, bs, file_len = 260, 1 << 20, 60 << 20
stop, written = False, [0]


def new_file(k):
    path = f"/tmp/fs/ext{k % 3}.dat"
    if os.path.exists(path):
        os.unlink(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o644)
    os.posix_fallocate(fd, 0, file_len)
    return fd


def writer():
    buf = mmap.mmap(-1, bs)
    buf.write(os.urandom(bs))
    k, off, since, n, t0 = 0, 0, 0, 0, time.monotonic()
    fd = new_file(k) if mode == "new" else os.open("/tmp/fs/big.dat", os.O_WRONLY | os.O_DIRECT)
    while not stop:
        if mib_s > 0:
            due = t0 + n / mib_s
            if due > time.monotonic():
                time.sleep(due - time.monotonic())
        n += 1
        os.pwrite(fd, buf, off)
        off, since = off + bs, since + 1
        written[0] += bs
        if since >= sync_every:
            os.fdatasync(fd)
            since = 0
        if mode == "new" and off >= file_len:
            os.fdatasync(fd)
            os.close(fd)
            k, off, since = k + 1, 0, 0
            fd = new_file(k)
        elif off >= 4 << 30:
            off = 0


log = os.open("/tmp/fs/a.dat", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
record = os.urandom(65536)
thread = threading.Thread(target=writer)
if sync_every:
    thread.start()
time.sleep(0.5)
lat, i, w0, t0 = [], 0, written[0], time.monotonic()
while t0 + i / rate - t0 <= dur:
    due = t0 + i / rate
    if due > time.monotonic():
        time.sleep(due - time.monotonic())
    os.write(log, record)
    os.fdatasync(log)
    lat.append((time.monotonic() - due) * 1000)
    i += 1
    if i % 2000 == 0:
        os.ftruncate(log, 0)
        os.lseek(log, 0, 0)
elapsed = time.monotonic() - t0
stop = True
if sync_every:
    thread.join()
lat.sort()
n = len(lat)
print(f"{mode} sync_every={sync_every} writer={(written[0] - w0) / 2**20 / elapsed:.0f} MiB/s n={n} "
      f"p50={lat[n // 2]:.2f} p95={lat[int(n * .95)]:.2f} p99={lat[int(n * .99)]:.2f} max={lat[-1]:.2f}")
