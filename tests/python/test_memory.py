"""Streaming in bounded memory: a 256 MiB value put from an iterator and read back as a stream, by a child
process whose peak resident memory (VmHWM) is measured; it must grow by far less than the value."""

from __future__ import annotations

import json
import subprocess
import sys

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
