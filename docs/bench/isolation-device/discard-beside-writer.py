#!/usr/bin/env python3
# Synced commits beside a loop that writes and deletes large files, to tell whether the file system's online
# discard is what stalls them (docs/bench/journal/isolation.md, issue 23, "Online discard"). A paced 64 KiB
# append + fdatasync loop
# (300/s, a stand-in for a write-ahead log, each timed from when it was due) runs beside a writer of 60 MiB files
# (posix_fallocate, 1 MiB O_DIRECT writes, fdatasync: as a put's extent file), in DIR (default /root/dexp, made
# and removed). Usage: discard-beside-writer.py MODE SECONDS [STEP_MIB] [DIR]
#   MODE none:   the writer writes over one file again and again (no block is ever freed);
#   MODE unlink: each file is new, and the one before it is unlinked once it is written;
#   MODE steps:  as unlink, but the file is first truncated STEP_MIB (default 8) at a time.
# Run it once mounted as is and once after `mount -o remount,nodiscard MOUNTPOINT` (remount with discard after).
# Prints the writer's MiB/s and the commits' latency percentiles in ms.
import os, mmap, time, threading, sys
MiB = 1 << 20
mode = sys.argv[1]; dur = float(sys.argv[2]); step = int(sys.argv[3]) * MiB if len(sys.argv) > 3 else 8 * MiB
d = sys.argv[4] if len(sys.argv) > 4 else "/root/dexp"; os.makedirs(d, exist_ok=True)
buf = mmap.mmap(-1, MiB); buf.write(os.urandom(MiB))
if mode not in ("none", "unlink", "steps"):
    sys.exit(f"unknown MODE {mode!r}: none, unlink or steps")
stop = False; made = [0]
def remove(p):
    if mode == "unlink":
        os.unlink(p)
    elif mode == "steps":
        fd = os.open(p, os.O_WRONLY); size = os.fstat(fd).st_size
        while size > 0:
            size = max(0, size - step); os.ftruncate(fd, size)
        os.close(fd); os.unlink(p)
def bulk():
    i = 0; prev = None
    while not stop:
        p = f"{d}/f{i}" if mode != "none" else f"{d}/f0"
        fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o644)
        if mode != "none" or i == 0: os.posix_fallocate(fd, 0, 60 * MiB)
        for k in range(60): os.pwrite(fd, buf, k * MiB)
        os.fdatasync(fd); os.close(fd)
        if prev and mode != "none": remove(prev)
        prev = p; i += 1; made[0] += 1
t = threading.Thread(target=bulk); t.start()
wal = os.open(f"{d}/wal", os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o644)
small = os.urandom(64 << 10); lat = []
end = time.monotonic() + dur; nxt = time.monotonic()
while time.monotonic() < end:
    nxt += 1 / 300
    s = max(0, nxt - time.monotonic()); time.sleep(s)
    os.write(wal, small); os.fdatasync(wal); lat.append(time.monotonic() - nxt)
stop = True; t.join(); os.close(wal)
lat.sort(); n = len(lat)
print(f"{mode} step {step//MiB}: {made[0]} bulk files ({made[0]*60/dur:.0f} MiB/s); commit latency from due ms p50 {lat[n//2]*1e3:.1f} p99 {lat[int(n*.99)]*1e3:.1f} p99.9 {lat[int(n*.999)]*1e3:.1f} max {lat[-1]*1e3:.0f}")
import shutil; shutil.rmtree(d)
