#!/usr/bin/env python3
"""Large whole reads from Python, for before/after pairs of the `saltblob` package (python-bench.py compares the
package with Rust; this compares two builds of the package with each other): on a fresh embedded store (or the
store --store names, under keys of the run's own, deleted at the end), COUNT puts
of SIZE_MB MiB, then COUNT gets with `get(key).bytes()` (each value kept, as python-bench.py keeps them), then COUNT
with `get_async` + `bytes_async()` and, per get, the event loop's longest stall (a task that sleeps 1 ms at a time
measures it), then COUNT `get_range_async` of all but each value's first and last byte, with the same stall.
Prints one JSON object: the package's path, each get's milliseconds, their medians, and the process's CPU seconds
(user, system) per phase: system time is mostly page faults of fresh memory.

Two builds side by side: install one with `pip install --target DIR ./crates/saltblob-py` and alternate runs with
and without `PYTHONPATH=DIR`.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

import saltblob


def _python_bench() -> Any:
    """scripts/python-bench.py as a module (its name is not an identifier), for its timing helpers."""
    spec = importlib.util.spec_from_file_location("python_bench", Path(__file__).with_name("python-bench.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _python_bench()


def cpu() -> List[float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return [r.ru_utime, r.ru_stime]


def since(before: List[float]) -> Dict[str, float]:
    now = cpu()
    return {"user_s": now[0] - before[0], "system_s": now[1] - before[1]}


async def async_reads(store: saltblob.Store, run: str, count: int, keep: List[bytes],
                      size: int = 0) -> Dict[str, Any]:
    """COUNT gets with `get_async` + `bytes_async()`; with SIZE, `get_range_async` of bytes 1 to SIZE - 1 instead."""
    ms, stalls = [], []
    for i in range(count):
        async def get(key: str = f"{run}k{i}") -> bytes:
            if size:
                return await store.get_range_async(key, 1, size - 1)
            return await (await store.get_async(key)).bytes_async()

        value, elapsed, stall = await BENCH.with_loop_stall(get)
        keep.append(value)
        ms.append(elapsed)
        stalls.append(stall)
    return {"get_ms": ms, "loop_stall_ms": stalls}


def async_phase(store: saltblob.Store, run: str, count: int, keep: List[bytes], size: int = 0) -> Dict[str, Any]:
    """`async_reads` on an event loop of its own, with its medians and the process's CPU seconds."""
    c = cpu()
    phase = asyncio.run(async_reads(store, run, count, keep, size))
    phase.update(median_ms=statistics.median(phase["get_ms"]),
                 loop_stall_median_ms=statistics.median(phase["loop_stall_ms"]), cpu=since(c))
    return phase


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=5, help="values (default 5)")
    parser.add_argument("--size-mb", type=int, default=60, help="size of each in MiB (default 60)")
    parser.add_argument("--store", help="store URL (default: a fresh embedded store in a temporary directory)")
    args = parser.parse_args()
    if args.count < 1 or args.size_mb < 1:
        raise SystemExit("--count and --size-mb must be at least 1")
    scratch = tempfile.mkdtemp(prefix="saltblob-large-reads.")
    out: Dict[str, Any] = {"package": os.path.dirname(saltblob.__file__), "count": args.count,
                           "size_mib": args.size_mb}
    run = f"large-reads/{time.time_ns()}/"
    try:
        with saltblob.open(args.store or f"rocksdb://{scratch}/store") as store:
            out["store"] = store.url
            value = os.urandom(args.size_mb << 20)
            for i in range(args.count):
                store.put(f"{run}k{i}", value)
            keep: List[bytes] = []
            c, ms = cpu(), []
            for i in range(args.count):
                t0 = time.perf_counter()
                keep.append(store.get(f"{run}k{i}").bytes())
                ms.append((time.perf_counter() - t0) * 1000)
            out["bytes"] = {"get_ms": ms, "median_ms": statistics.median(ms), "cpu": since(c)}
            if any(k != value for k in keep):
                raise SystemExit("bytes(): a value read differs from the one put")
            keep.clear()
            out["bytes_async"] = async_phase(store, run, args.count, keep)
            if any(k != value for k in keep):
                raise SystemExit("bytes_async(): a value read differs from the one put")
            keep.clear()
            out["get_range_async"] = async_phase(store, run, args.count, keep, len(value))
            if any(k != value[1:-1] for k in keep):
                raise SystemExit("get_range_async(): a range read differs from the value put")
            for i in range(args.count):
                store.delete(f"{run}k{i}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
