#!/usr/bin/env python3
"""Speed from Python: the phases of `saltblob bench` made through the `saltblob` package, then `saltblob bench`
itself on the same store, side by side; and, on Cassandra, `saltblob.compat.SaltedBlobStore` against the salting
article's own Python class (given as a file) on the same node with the same shape.

Run from the Python tests' virtual environment (it has the package and cassandra-driver), best through
`scripts/python-tests.sh --bench -- ARGS`:

  large_write  COUNT puts of LARGE_MB MiB, one at a time (`Store.put` of a bytes object)
  large_read   COUNT gets of them, one at a time (`Store.get(key).bytes()`), bytes compared after the clock
  large_read_async  the same with asyncio (`get_async` + `bytes_async`), and the event loop's longest stall during
               each get (a task that sleeps 1 ms at a time measures it: details.loop_stall_ms); Python only
  small_write  as many puts of SMALL_KB KiB as move the same bytes, CONCURRENCY in flight (asyncio, `put_async`;
               CONCURRENCY worker coroutines, each starting its next operation when one ends, as the Rust bench's do)
  small_read   gets of them, CONCURRENCY in flight (`get_async` + `bytes_async`), bytes compared

Then `saltblob bench --no-probe` with the same sizes on the same store (an embedded store is closed by Python
first). That is one round; --rounds N alternates which side goes first (a cold start, a node's JIT warming up or a
store's background work then favour neither), and each phase's ratio is the median of Python's throughputs over the
median of Rust's. The JSON has "rounds" (each: "first", "python", "rust" = `saltblob bench --json` as it is) and
"comparison" (per phase: the medians, their ratio, and each round's ratio).

With --reference FILE (the article's salted_blob_store.py) and a cql:// store: COMPAT_COUNT blobs of LARGE_MB MiB,
64 KiB chunks, 100 salts, written then read one at a time by the article's class and by the compat class, each in
a keyspace of its own, once per round (the order alternating too); a class that fails a round (the article's class
can be refused by the driver as "overloaded") has that round's error recorded, and the ratios are of the medians of
the rounds that ended; "compat" in the JSON. Each round also records the CPU seconds per blob of the client (this
process) and of the node (every Cassandra or ScyllaDB process of this machine, found by its command line), and the
two classes are printed side by side: throughput, P99, CPU seconds per blob. The article's class is imported from
FILE, never part of saltblob.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import importlib.util
import json
import math
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, List, Tuple, TypeVar

import saltblob

T = TypeVar("T")

MIB = 1 << 20
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def node_pids() -> List[int]:
    """The Cassandra and ScyllaDB processes of this machine (by their command lines)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"CassandraDaemon" in cmdline or cmdline.split(b"\0", 1)[0].endswith(b"scylla"):
            pids.append(int(entry.name))
    return pids


def cpu_seconds(pids: List[int]) -> float:
    """User + system CPU seconds of processes PIDS so far (/proc/PID/stat), those still running."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return total


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--saltblob", required=True, help="the saltblob binary (for `saltblob bench`)")
    p.add_argument("--store", help="store URL (rocksdb:///dir or cql://host:port/keyspace); default: a fresh "
                                   "embedded store in a temporary directory")
    p.add_argument("--count", type=int, default=5, help="large blobs (default 5)")
    p.add_argument("--large-mb", type=int, default=60, help="large size in MiB (default 60)")
    p.add_argument("--small-kb", type=int, default=64, help="small size in KiB (default 64)")
    p.add_argument("--concurrency", type=int, default=16, help="small operations in flight (default 16)")
    p.add_argument("--reference", help="the salting article's salted_blob_store.py, for the compat comparison")
    p.add_argument("--compat-count", type=int, default=3, help="blobs of the compat comparison (default 3)")
    p.add_argument("--store-concurrency", type=int, default=8,
                   help="max_concurrency given to both classes' write and read (default 8; the article's default, "
                        "0, sends a 60 MiB blob's 60 batches at once, which one driver connection refuses as "
                        "overloaded)")
    p.add_argument("--rounds", type=int, default=2,
                   help="rounds of Python and Rust, alternating which goes first (default 2)")
    p.add_argument("--json", help="write the results as JSON to FILE")
    return p.parse_args()


def percentile(sorted_ms: List[float], q: float) -> float:
    """Nearest-rank percentile of a sorted list."""
    return sorted_ms[max(0, math.ceil(q * len(sorted_ms)) - 1)]


def phase(name: str, latencies_ms: List[float], size: int, seconds: float) -> Dict[str, Any]:
    """A phase in the shape of `saltblob bench`'s JSON."""
    lat = sorted(latencies_ms)
    n = len(lat)
    return {
        "name": name,
        "ops": n,
        "bytes": n * size,
        "seconds": seconds,
        "throughput_mib_s": n * size / MIB / seconds,
        "ops_per_s": n / seconds,
        "latency_ms": {"p50": percentile(lat, 0.5), "p99": percentile(lat, 0.99), "max": lat[-1]},
    }


def payload(base: bytes, index: int) -> bytes:
    """BASE with INDEX in its first 8 bytes: every value differs."""
    return struct.pack("<Q", index) + base[8:]


def one_at_a_time(name: str, count: int, size: int, op: Callable[[int], None]) -> Dict[str, Any]:
    lats = []
    t0 = time.perf_counter()
    for i in range(count):
        s = time.perf_counter()
        op(i)
        lats.append((time.perf_counter() - s) * 1000)
    return phase(name, lats, size, time.perf_counter() - t0)


async def in_flight(name: str, count: int, size: int, concurrency: int,
                    op: Callable[[int], Awaitable[Any]]) -> Dict[str, Any]:
    """COUNT operations `op(i)`, CONCURRENCY in flight: as many worker coroutines, each taking the next index when
    its operation ends, as the Rust bench's workers do (not one task per operation waiting on a semaphore, which
    costs the event loop's thread about 18 µs more per operation here and would be measured as the package's)."""
    lats: List[float] = []
    indices = iter(range(count))

    async def worker() -> None:
        for i in indices:
            s = time.perf_counter()
            await op(i)
            lats.append((time.perf_counter() - s) * 1000)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return phase(name, lats, size, time.perf_counter() - t0)


def bench_python(store: saltblob.Store, args: argparse.Namespace, run: str) -> List[Dict[str, Any]]:
    large, small = args.large_mb * MIB, args.small_kb * 1024
    small_count = args.count * large // small
    base_large, base_small = os.urandom(large), os.urandom(small)
    phases = []
    bodies = [payload(base_large, i) for i in range(args.count)]
    phases.append(one_at_a_time("large_write", args.count, large,
                                lambda i: store.put(f"{run}/large/{i}", bodies[i])))
    got: Dict[int, bytes] = {}

    def read(i: int) -> None:
        got[i] = store.get(f"{run}/large/{i}").bytes()

    phases.append(one_at_a_time("large_read", args.count, large, read))
    if any(got[i] != bodies[i] for i in range(args.count)):
        raise SystemExit("large_read: bytes differ from those put")
    got.clear()
    phases.append(asyncio.run(large_reads_async(store, args.count, large, run, got)))
    if any(got[i] != bodies[i] for i in range(args.count)):
        raise SystemExit("large_read_async: bytes differ from those put")
    del bodies, got

    async def smalls() -> None:
        async def put(i: int) -> None:
            await store.put_async(f"{run}/small/{i}", payload(base_small, i))

        async def get(i: int) -> None:
            data = await (await store.get_async(f"{run}/small/{i}")).bytes_async()
            if data != payload(base_small, i):
                raise SystemExit(f"small_read {i}: bytes differ from those put")

        phases.append(await in_flight("small_write", small_count, small, args.concurrency, put))
        phases.append(await in_flight("small_read", small_count, small, args.concurrency, get))

    asyncio.run(smalls())
    for e in list(store.list(f"{run}/")):
        store.delete(e.key)
    return phases


async def with_loop_stall(call: Callable[[], Awaitable[T]]) -> Tuple[T, float, float]:
    """Awaits CALL() while a task sleeps 1 ms at a time: its result, its milliseconds, and the longest the event loop
    went without running that task, in ms (what the call costs every other coroutine of the loop)."""
    done = asyncio.Event()
    worst = 0.0

    async def ticker() -> None:
        nonlocal worst
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            worst = max(worst, now - last - 0.001)
            last = now

    tick = asyncio.ensure_future(ticker())
    await asyncio.sleep(0)
    start = time.perf_counter()
    try:
        result = await call()
    finally:
        elapsed = (time.perf_counter() - start) * 1000
        done.set()
        await tick
    return result, elapsed, worst * 1000


async def large_reads_async(store: saltblob.Store, count: int, size: int, run: str,
                            got: Dict[int, bytes]) -> Dict[str, Any]:
    """COUNT large gets through asyncio, one at a time, into GOT, each with the event loop's longest stall."""
    lats, stalls = [], []
    t0 = time.perf_counter()
    for i in range(count):
        async def get(key: str = f"{run}/large/{i}") -> bytes:
            return await (await store.get_async(key)).bytes_async()

        got[i], ms, stall = await with_loop_stall(get)
        lats.append(ms)
        stalls.append(stall)
    out = phase("large_read_async", lats, size, time.perf_counter() - t0)
    out["details"] = {"loop_stall_ms": {"p50": statistics.median(stalls), "max": max(stalls)}}
    return out


def bench_rust(args: argparse.Namespace, store_url: str, json_path: str) -> Dict[str, Any]:
    command = [args.saltblob, "--quiet", "bench", "--store", store_url, "--count", str(args.count),
               "--large-mb", str(args.large_mb), "--small-kb", str(args.small_kb),
               "--concurrency", str(args.concurrency), "--no-probe", "--json", json_path]
    print("== rust: saltblob bench", " ".join(command[3:]).replace(store_url, "STORE"), flush=True)
    subprocess.run(command, check=True, timeout=1800, stdout=subprocess.DEVNULL)
    return json.loads(Path(json_path).read_text())


def median(values: List[float]) -> float:
    return statistics.median(values)


def compare(rounds: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per phase: the median of Python's and of Rust's throughputs over ROUNDS, their ratio, each round's ratio."""
    rows = []
    for p in rounds[0]["python"]:
        name = p["name"]
        pairs = []
        for r in rounds:
            py = next(x for x in r["python"] if x["name"] == name)
            rs = next((x for x in r["rust"]["phases"] if x["name"] == name), None)
            if rs:
                pairs.append((py, rs))
        if not pairs:
            continue
        python_mib_s = median([py["throughput_mib_s"] for py, _ in pairs])
        rust_mib_s = median([rs["throughput_mib_s"] for _, rs in pairs])
        rows.append({
            "phase": name,
            "python_mib_s": python_mib_s,
            "rust_mib_s": rust_mib_s,
            "python_over_rust": python_mib_s / rust_mib_s,
            "per_round": [py["throughput_mib_s"] / rs["throughput_mib_s"] for py, rs in pairs],
            "python_p99_ms": median([py["latency_ms"]["p99"] for py, _ in pairs]),
            "rust_p99_ms": (median([rs["latency_ms"]["p99"] for _, rs in pairs])
                            if all(rs.get("latency_ms") for _, rs in pairs) else None),
        })
    return rows


def bench_compat(args: argparse.Namespace, cql: str) -> Dict[str, Any]:
    """The article's class (from --reference) and the compat class, same node, same shape, one after the other."""
    from cassandra.cluster import Cluster  # type: ignore[import-untyped]

    from saltblob.compat import SaltedBlobStore

    spec = importlib.util.spec_from_file_location("reference_salted_blob_store", args.reference)
    assert spec is not None and spec.loader is not None
    reference = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = reference  # its dataclasses look their module up
    spec.loader.exec_module(reference)
    host, port = cql.rsplit(":", 1)
    cluster = Cluster(contact_points=[host], port=int(port), protocol_version=4)
    session = cluster.connect()
    blob = hashlib.shake_256(b"compat").digest(args.large_mb * MIB)
    results: Dict[str, Any] = {"blobs": args.compat_count, "size_mib": args.large_mb, "chunk_size": 65536,
                               "max_salt": 100, "max_concurrency": args.store_concurrency,
                               "reference": [], "compat": []}
    classes = [("reference", reference.SaltedBlobStore), ("compat", SaltedBlobStore)]
    try:
        for round_ in range(args.rounds):
            for name, cls in (classes if round_ % 2 == 0 else classes[::-1]):
                results[name].append(compat_round(args, session, name, cls, blob))
    finally:
        cluster.shutdown()
    for what in ("write", "read"):
        ended = {name: [r[what]["throughput_mib_s"] for r in results[name] if "error" not in r]
                 for name, _ in classes}
        results[f"{what}_compat_over_reference"] = (median(ended["compat"]) / median(ended["reference"])
                                                    if all(ended.values()) else None)
    results["side_by_side"] = side_by_side(results)
    return results


def side_by_side(results: Dict[str, Any]) -> Dict[str, Any]:
    """Per phase and class, the medians over the rounds that ended: MiB/s, P99 ms, client and node CPU seconds per
    blob; printed as a table."""
    table: Dict[str, Any] = {}
    print(f"{'phase':<6} {'class':<10} {'MiB/s':>7} {'P99 ms':>8} {'client CPU s/blob':>18} {'node CPU s/blob':>16}"
          f"  (medians of the rounds that ended)")
    for what in ("write", "read"):
        for name in ("reference", "compat"):
            ended = [r[what] for r in results[name] if "error" not in r]
            if not ended:
                print(f"{what:<6} {name:<10} failed every round")
                continue
            row = {k: median([e[k] for e in ended]) for k in ("throughput_mib_s", "client_cpu_s_per_blob",
                                                               "node_cpu_s_per_blob")}
            row["p99_ms"] = median([e["latency_ms"]["p99"] for e in ended])
            table[f"{what}/{name}"] = row
            print(f"{what:<6} {name:<10} {row['throughput_mib_s']:7.1f} {row['p99_ms']:8.1f} "
                  f"{row['client_cpu_s_per_blob']:18.3f} {row['node_cpu_s_per_blob']:16.3f}")
    return table


def compat_round(args: argparse.Namespace, session: Any, name: str, cls: Any, blob: bytes) -> Dict[str, Any]:
    """COMPAT_COUNT writes then reads of BLOB by CLS in a keyspace of its own; {"error": ...} if the class fails."""
    size = len(blob)
    ks = f"pybench_{name}_{int(time.time() * 1000)}"
    store = cls(session, keyspace=ks)
    store.create_schema(replication={"class": "SimpleStrategy", "replication_factor": 1})
    nodes = node_pids()

    def with_cpu(phase_: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
        client0, node0 = time.process_time(), cpu_seconds(nodes)
        out = phase_()
        out["client_cpu_s_per_blob"] = (time.process_time() - client0) / args.compat_count
        out["node_cpu_s_per_blob"] = (cpu_seconds(nodes) - node0) / args.compat_count
        return out

    try:
        w = with_cpu(lambda: one_at_a_time("write", args.compat_count, size, lambda i: store.write(
            f"blob-{i}".encode(), blob, max_salt=100, chunk_size=65536,
            max_concurrency=args.store_concurrency)))

        def read(i: int) -> None:
            chunks = store.read(f"blob-{i}".encode(), max_concurrency=args.store_concurrency)
            if chunks is None or sum(len(c) for c in chunks) != size:
                raise SystemExit(f"{name}: blob-{i} read back wrong")

        r = with_cpu(lambda: one_at_a_time("read", args.compat_count, size, read))
    except Exception as e:  # any failure of a class (the driver's own errors too) is that round's result
        print(f"== {name}: failed: {e}", flush=True)
        return {"error": str(e)}
    finally:
        store.drop_schema()
    print(f"== {name}: write {w['throughput_mib_s']:.1f} MiB/s, read {r['throughput_mib_s']:.1f} MiB/s", flush=True)
    return {"write": w, "read": r}


def main() -> None:
    args = parse_args()
    scratch = tempfile.mkdtemp(prefix="saltblob-pybench.")
    try:
        run_all(args, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_all(args: argparse.Namespace, scratch: str) -> None:
    """The runs of main(), with SCRATCH for the default store and the Rust bench's JSON."""
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    if args.reference and not (args.store or "").startswith("cql://"):
        raise SystemExit("--reference needs a cql:// store (the node both classes write to)")
    store_url = args.store or f"rocksdb://{scratch}/store"
    rounds = []
    for round_ in range(args.rounds):
        python_first = round_ % 2 == 0
        print(f"== round {round_ + 1} of {args.rounds}, {'Python' if python_first else 'Rust'} first", flush=True)
        rust_json = os.path.join(scratch, f"rust-{round_}.json")
        rust = None if python_first else bench_rust(args, store_url, rust_json)
        python, shown_url = python_round(args, store_url, f"pybench/{int(time.time())}-{round_}")
        if rust is None:
            rust = bench_rust(args, store_url, rust_json)
        rounds.append({"first": "python" if python_first else "rust", "python": python, "rust": rust})
    rows = compare(rounds)
    print(f"{'phase':<12} {'python MiB/s':>13} {'rust MiB/s':>11} {'python/rust':>12}  per round (medians over "
          f"{args.rounds} rounds)")
    for r in rows:
        print(f"{r['phase']:<12} {r['python_mib_s']:13.1f} {r['rust_mib_s']:11.1f} {r['python_over_rust']:12.2f}  "
              + " ".join(f"{x:.2f}" for x in r["per_round"]))
    out: Dict[str, Any] = {"store": shown_url,
                           "config": {k: getattr(args, k)
                                      for k in ("count", "large_mb", "small_kb", "concurrency", "rounds")},
                           "rounds": rounds, "comparison": rows, "compat": None}
    if args.reference:
        out["compat"] = bench_compat(args, store_url[len("cql://"):].split("/")[0].split(",")[0])
        c = out["compat"]
        print("compat / reference (medians): " + ", ".join(
            f"{what} " + (f"{c[f'{what}_compat_over_reference']:.2f}"
                          if c[f"{what}_compat_over_reference"] is not None else "n/a (a class failed every round)")
            for what in ("write", "read")))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


def python_round(args: argparse.Namespace, store_url: str, run: str) -> Tuple[List[Dict[str, Any]], str]:
    """The Python phases on STORE_URL under keys RUN/..., the store closed at the end (an embedded one is then
    free for the Rust bench); and the store's URL as it shows it (without a password)."""
    with saltblob.open(store_url) as store:
        print(f"== python: {store.url}", flush=True)
        python = bench_python(store, args, run)
    for p in python:
        stall = p.get("details", {}).get("loop_stall_ms")
        print(f"   {p['name']:<16} {p['throughput_mib_s']:8.1f} MiB/s {p['ops_per_s']:9.1f} ops/s "
              f"P99 {p['latency_ms']['p99']:8.1f} ms"
              + (f", event loop stalled {stall['p50']:.1f} ms (median), {stall['max']:.1f} ms (max)" if stall else ""),
              flush=True)
    return python, store.url


if __name__ == "__main__":
    sys.exit(main())
