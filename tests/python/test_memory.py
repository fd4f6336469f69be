"""Streaming in bounded memory: a 256 MiB value put from an iterator and read back as a stream, by a child
process whose peak resident memory (VmHWM) is measured; it must grow by far less than the value. And a range read
(`get_ranges` of one range, what a saltblob:// file's read is), sync and asyncio: its peak must stay below two
copies of the range."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

SIZE_MIB = 256
# The store's in-flight window (16 MiB) for the put and for the read, RocksDB's write buffers and block cache: the
# growth measured is about 50 MiB; a copy of the value would be 256 MiB more.
LIMIT_MIB = 128

CHILD = r"""
import json, sys, hashlib
import saltblob

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024

url, size_mib = sys.argv[1], int(sys.argv[2])
piece = bytes(range(256)) * 4096  # 1 MiB
before = hwm()
with saltblob.open(url) as store:
    h = hashlib.blake2b()
    def pieces():
        for i in range(size_mib):
            p = piece[i % 256:] + piece[:i % 256]
            h.update(p)
            yield p
    m = store.put("big", pieces())
    after_put = hwm()
    g = hashlib.blake2b()
    n = 0
    for p in store.get("big").stream(1 << 20):
        g.update(p)
        n += len(p)
    print(json.dumps({"before": before, "after_put": after_put, "after_get": hwm(), "size": m.size, "read": n,
                      "same": h.digest() == g.digest()}))
"""


def test_streamed_put_and_get_in_bounded_memory(rocksdb_url: str) -> None:
    out = subprocess.run([sys.executable, "-c", CHILD, rocksdb_url, str(SIZE_MIB)], check=True,
                         capture_output=True, text=True, timeout=300).stdout
    r = json.loads(out)
    print(f"python streaming {SIZE_MIB} MiB: peak RSS {r['before']} MiB before, {r['after_put']} MiB after the "
          f"put, {r['after_get']} MiB after the streamed get")
    assert r["size"] == r["read"] == SIZE_MIB << 20 and r["same"]
    assert r["after_get"] - r["before"] < LIMIT_MIB, r


RANGE_MIB = 128
# A range read copied once grows the peak by its own `bytes` object (128 MiB measured, sync and asyncio); one read
# into an intermediate buffer first needs a second RANGE_MIB at its peak (256 MiB measured, before it was fixed).
RANGE_LIMIT_MIB = RANGE_MIB + 64

RANGE_CHILD = r"""
import asyncio, hashlib, json, sys
import saltblob

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) // 1024

def reset_peak():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident set (VmHWM) starts again from the current one
    return status("VmRSS")

async def read_async(store, end):
    # Measured within the event loop: asyncio.run's own set-up and tear-down are not the read's.
    before = reset_peak()
    got = await store.get_ranges_async("big", [1], [end])
    return got, status("VmHWM") - before

def read_sync(store, end):
    before = reset_peak()
    got = store.get_ranges("big", [1], [end])
    return got, status("VmHWM") - before

url, size_mib = sys.argv[1], int(sys.argv[2])
pieces = [bytes([i]) * (1 << 20) for i in range(size_mib)]
size = size_mib << 20
want = hashlib.blake2b(b"".join(pieces)[1:size - 1]).digest()  # bytes 1 to size - 1
out = {}
with saltblob.open(url) as store:
    store.put("big", iter(pieces))
    del pieces
    loop = asyncio.new_event_loop()
    for name, read in [
        ("sync", lambda: read_sync(store, size - 1)),
        ("async", lambda: loop.run_until_complete(read_async(store, size - 1))),
    ]:
        for _ in range(2):  # the second read measured: caches and the runtime's threads as the first left them
            got, grown = read()
            same = len(got) == 1 and hashlib.blake2b(got[0]).digest() == want
            del got
        out[name] = {"grown": grown, "same": same}
print(json.dumps(out))
"""


def test_a_range_read_is_copied_once(rocksdb_url: str) -> None:
    if not os.access("/proc/self/clear_refs", os.W_OK):
        pytest.skip("the peak resident set cannot be reset here (/proc/self/clear_refs)")
    out = subprocess.run([sys.executable, "-c", RANGE_CHILD, rocksdb_url, str(RANGE_MIB)], check=True,
                         capture_output=True, text=True, timeout=300).stdout
    r = json.loads(out)
    print(f"python get_ranges of one {RANGE_MIB} MiB range: peak RSS grew {r['sync']['grown']} MiB (sync), "
          f"{r['async']['grown']} MiB (asyncio)")
    for name in ("sync", "async"):
        assert r[name]["same"], r
        assert r[name]["grown"] < RANGE_LIMIT_MIB, (name, r)
