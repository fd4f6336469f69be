#!/usr/bin/env python3
"""dd's write pattern (1 MiB O_DIRECT writes at depth 1 into a pre-sized file, then fdatasync) from a buffer in
small pages against one in a transparent huge page, rounds alternating.

    direct-write-pages.py [DIR] [ROUNDS]   (defaults: the current directory, 12)

A direct write is one segment per physically contiguous piece of its buffer; a device that takes fewer segments
per request than a 1 MiB buffer has 4 KiB pages (256) gets each write split. docs/bench/journal/extents.md,
*Write buffers in huge pages*."""
import ctypes
import mmap
import os
import statistics
import sys
import time

MIB = 1 << 20
HUGE = 2 * MIB
COUNT = 60


def buffer(huge):
    m = mmap.mmap(-1, 2 * HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if huge:
        m.madvise(mmap.MADV_HUGEPAGE)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
    off = (HUGE - addr % HUGE) % HUGE
    view = memoryview(m)[off:off + MIB]
    view[:] = os.urandom(MIB)
    return m, view


def run(path, huge):
    m, view = buffer(huge)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT)
    try:
        os.posix_fallocate(fd, 0, COUNT * MIB)
        start = time.perf_counter()
        for i in range(COUNT):
            os.pwrite(fd, view, i * MIB)
        os.fdatasync(fd)
        return time.perf_counter() - start
    finally:
        os.close(fd)
        os.unlink(path)
        view.release()
        m.close()


def main():
    directory = sys.argv[1] if len(sys.argv) > 1 else "."
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 12
    path = os.path.join(directory, "direct-write-pages.tmp")
    times = {False: [], True: []}
    for _ in range(rounds):
        for huge in (False, True):
            times[huge].append(run(path, huge))
    for huge in (False, True):
        t = times[huge]
        med = statistics.median(t)
        print(f"{'huge page ' if huge else 'small pages'}: {COUNT} MiB in {med * 1e3:.1f} ms median "
              f"(min {min(t) * 1e3:.1f}, max {max(t) * 1e3:.1f}), {COUNT / med:.0f} MiB/s")


if __name__ == "__main__":
    main()
