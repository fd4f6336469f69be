#!/usr/bin/env python3
"""The bench through the S3 server: the phases of `saltblob bench`, made with boto3 against `saltblob serve`, then
`saltblob bench` itself on a second, fresh store of the same kind, side by side.

Run from the S3 tests' virtual environment, best through `scripts/s3-clients.sh --bench [STORE_URL] [-- ARGS]`:

  large_write  COUNT puts of LARGE_MB MiB, one at a time (one PutObject each, as `saltblob bench` puts one blob)
  large_read   COUNT gets of them, one at a time, bytes compared after the timed read
  small_write  as many puts of SMALL_KB KiB as move the same bytes, CONCURRENCY in flight (a thread pool)
  small_read   gets of them, CONCURRENCY in flight, bytes compared

Per phase: throughput (MiB/s), latency (P50, P99, …, ms), and the CPU seconds the client (this process: boto3
signs every request with SigV4 and, over plain HTTP, hashes every body with SHA-256) and the server used, since
both share the machine's cores. The JSON has "server" (these phases), "direct" (`saltblob bench --json` as it
is) and "comparison" (server ÷ direct, per phase).
"""

import argparse
import concurrent.futures
import json
import math
import os
import random
import struct
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "s3"))

from s3util import MIB, ignore_aws_configuration, make_client
from saltblob_server import Server, sibling_store

BUCKET = "s3-bench"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--saltblob", required=True, help="the saltblob binary")
    p.add_argument("--store", required=True, help="store URL the server serves (rocksdb:///dir or cql://…/ks)")
    p.add_argument("--work", default=".", help="directory for the server's log")
    p.add_argument("--count", type=int, default=5, help="large blobs (default 5)")
    p.add_argument("--large-mb", type=int, default=60, help="large size in MiB (default 60)")
    p.add_argument("--small-kb", type=int, default=64, help="small size in KiB (default 64)")
    p.add_argument("--concurrency", type=int, default=16, help="small operations in flight (default 16)")
    p.add_argument("--json", help="write the results as JSON to FILE")
    p.add_argument("--no-direct", action="store_true", help="skip `saltblob bench` on the second store")
    return p.parse_args()


def percentile(sorted_ms, q):
    """Nearest-rank percentile of a sorted list."""
    return sorted_ms[max(0, math.ceil(q * len(sorted_ms)) - 1)]


def process_cpu_seconds(pid):
    """User + system CPU seconds of process PID so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def run_phase(name, description, operations, size, concurrency, server_pid):
    """Runs OPERATIONS (callables that move SIZE bytes each and return their own latency in ms) with CONCURRENCY
    in flight; returns the phase's figures in the shape of `saltblob bench`'s JSON phases, plus the client's and
    the server's CPU seconds."""
    latencies, errors = [], []
    client_cpu, server_cpu = time.process_time(), process_cpu_seconds(server_pid)
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(max_workers=concurrency) as pool:
        for future in [pool.submit(op) for op in operations]:
            try:
                latencies.append(future.result())
            except Exception as e:  # noqa: BLE001 - counted and reported, as saltblob bench does
                errors.append(str(e))
    # As in `saltblob bench`: a sequential phase's time is the sum of its operations' (preparing each body is
    # excluded), a concurrent phase's the wall time.
    seconds = max(sum(latencies) / 1000 if concurrency == 1 else time.perf_counter() - start, 1e-9)
    latencies.sort()
    ops = len(latencies)
    phase = {
        "name": name,
        "description": description,
        "ops": ops,
        "bytes": ops * size,
        "seconds": seconds,
        "throughput_mib_s": ops * size / MIB / seconds,
        "ops_per_s": ops / seconds,
        "errors": len(errors),
        "error_messages": errors[:5],
        "latency_ms": None,
        "client_cpu_s": time.process_time() - client_cpu,
        "server_cpu_s": process_cpu_seconds(server_pid) - server_cpu,
    }
    if latencies:
        phase["latency_ms"] = {
            "min": latencies[0],
            "mean": sum(latencies) / ops,
            **{k: percentile(latencies, q) for k, q in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99), ("p999", 0.999))},
            "max": latencies[-1],
        }
    return phase


def payload(base, index):
    """BASE with INDEX in its first 8 bytes: every object differs."""
    return struct.pack("<Q", index) + base[8:]


def put_op(s3, key, base, index):
    """A put of payload(BASE, INDEX) that returns its latency (ms); the body is made before the clock starts."""

    def op():
        body = payload(base, index)
        start = time.perf_counter()
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)
        return (time.perf_counter() - start) * 1000

    return op


def get_op(s3, key, base, index):
    """A get of KEY, read whole, that returns its latency (ms); the bytes are compared after the clock stops."""

    def op():
        start = time.perf_counter()
        data = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
        elapsed = (time.perf_counter() - start) * 1000
        if data != payload(base, index):
            raise ValueError(f"{key}: bytes differ from those put")
        return elapsed

    return op


def bench_through_server(s3, args, server_pid):
    """The four phases through the server; each phase's keys are deleted after its reads."""
    large, small = args.large_mb * MIB, args.small_kb * 1024
    phases = []
    for size_name, size, count, concurrency in (
        ("large", large, args.count, 1),
        ("small", small, args.count * large // small, args.concurrency),
    ):
        base = random.Random(size).randbytes(size)
        in_flight = "one at a time" if concurrency == 1 else f"{concurrency} in flight"
        keys = [f"{size_name}/{i:06}" for i in range(count)]
        for op_name, make_op, what in (("write", put_op, "PutObject"), ("read", get_op, "GetObject")):
            operations = [make_op(s3, key, base, i) for i, key in enumerate(keys)]
            checked = ", bytes compared" if op_name == "read" else ""
            description = f"{count} {what} of {human(size)}, {in_flight}{checked}"
            phases.append(run_phase(f"{size_name}_{op_name}", description, operations, size, concurrency, server_pid))
        delete_keys(s3, keys)
    return phases


def delete_keys(s3, keys):
    for i in range(0, len(keys), 1000):
        s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys[i : i + 1000]], "Quiet": True})


def human(size):
    return f"{size // MIB} MiB" if size >= MIB else f"{size // 1024} KiB"


def bench_direct(args, store_url, json_path):
    """`saltblob bench` with the same sizes on STORE_URL; its JSON. Without the probe: the comparison is with the
    server, not with the device."""
    command = [
        args.saltblob,
        "--quiet",
        "bench",
        "--store",
        store_url,
        "--count",
        str(args.count),
        "--large-mb",
        str(args.large_mb),
        "--small-kb",
        str(args.small_kb),
        "--concurrency",
        str(args.concurrency),
        "--no-probe",
        "--json",
        str(json_path),
    ]
    print("== direct:", " ".join(command), flush=True)
    subprocess.run(command, check=True, timeout=1800, stdout=subprocess.DEVNULL)
    return json.loads(Path(json_path).read_text())


def compare(server_phases, direct):
    by_name = {p["name"]: p for p in direct["phases"]}
    rows = []
    for s in server_phases:
        d = by_name.get(s["name"])
        if not d or not s["latency_ms"] or not d.get("latency_ms"):
            continue
        rows.append(
            {
                "phase": s["name"],
                "server_mib_s": s["throughput_mib_s"],
                "direct_mib_s": d["throughput_mib_s"],
                "throughput_server_over_direct": s["throughput_mib_s"] / d["throughput_mib_s"],
                "server_p50_ms": s["latency_ms"]["p50"],
                "direct_p50_ms": d["latency_ms"]["p50"],
                "server_p99_ms": s["latency_ms"]["p99"],
                "direct_p99_ms": d["latency_ms"]["p99"],
                "p99_server_over_direct": s["latency_ms"]["p99"] / d["latency_ms"]["p99"],
            }
        )
    return rows


def print_phases(phases):
    print(
        f"{'phase':<12} {'ops':>6} {'MiB/s':>8} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'errors':>6} "
        f"{'client cpu s':>12} {'server cpu s':>12}"
    )
    for p in phases:
        lat = p["latency_ms"] or {}
        print(
            f"{p['name']:<12} {p['ops']:>6} {p['throughput_mib_s']:>8.1f} {lat.get('p50', 0):>8.2f} "
            f"{lat.get('p99', 0):>8.2f} {lat.get('max', 0):>8.2f} {p['errors']:>6} {p['client_cpu_s']:>12.2f} "
            f"{p['server_cpu_s']:>12.2f}"
        )


def print_comparison(rows):
    print(
        f"{'phase':<12} {'server MiB/s':>12} {'direct MiB/s':>12} {'ratio':>6} {'server p99':>10} "
        f"{'direct p99':>10} {'ratio':>6}"
    )
    for r in rows:
        print(
            f"{r['phase']:<12} {r['server_mib_s']:>12.1f} {r['direct_mib_s']:>12.1f} "
            f"{r['throughput_server_over_direct']:>6.2f} {r['server_p99_ms']:>10.2f} {r['direct_p99_ms']:>10.2f} "
            f"{r['p99_server_over_direct']:>6.2f}"
        )


def main():
    args = parse_args()
    ignore_aws_configuration()
    work = Path(args.work)
    load_at_start = os.getloadavg()
    server = Server(args.saltblob, args.store, work / "s3-bench-server.log", pid_dir=work)
    try:
        server.start()
        s3 = make_client(server.endpoint, server.access_key, server.secret_key)
        s3.create_bucket(Bucket=BUCKET)
        print(f"== through the server: {server.endpoint} on {args.store}", flush=True)
        phases = bench_through_server(s3, args, server.process.pid)
        s3.delete_bucket(Bucket=BUCKET)
        peak_rss_mib = server.peak_rss_kib() / 1024
    finally:
        server.stop()
    print_phases(phases)
    print(f"server peak RSS (VmHWM): {peak_rss_mib:.0f} MiB")
    result = {
        "store": args.store,
        "config": {
            "count": args.count,
            "large_mb": args.large_mb,
            "small_kb": args.small_kb,
            "small_count": args.count * args.large_mb * 1024 // args.small_kb,
            "concurrency": args.concurrency,
            "cpus": os.cpu_count(),
            "load_average_at_start": load_at_start,
            "saltblob": subprocess.run(
                [args.saltblob, "--version"], capture_output=True, text=True, check=False
            ).stdout.strip(),
            "client": "boto3 (SigV4, path-style, defaults otherwise)",
        },
        "server": {"phases": phases, "peak_rss_mib": peak_rss_mib},
        "direct": None,
        "comparison": [],
    }
    if not args.no_direct:
        direct_store = sibling_store(args.store, "direct")
        result["direct"] = bench_direct(args, direct_store, work / "direct.json")
        result["comparison"] = compare(phases, result["direct"])
        print(f"== through the server vs direct ({direct_store})")
        print_comparison(result["comparison"])
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    failed = sum(p["errors"] for p in phases)
    if failed:
        print(f"error: {failed} operation(s) failed through the server (see error_messages in the JSON)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
