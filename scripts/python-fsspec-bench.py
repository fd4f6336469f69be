#!/usr/bin/env python3
"""Reading a parquet dataset through ``saltblob://`` (the fsspec filesystem of the package, in this process) against
the same files on the local file system, and against the same blobs through ``saltblob serve`` read with s3fs.

Run from the Python tests' virtual environment, best through `scripts/python-tests.sh --fsspec-bench -- ARGS`:

1. A dataset of FILES parquet files, SIZE_MIB in all (int64 ids in order, random float64 values, random int32
   amounts, a dictionary-encoded category; snappy; row groups of 1 Mi rows by default), written to a local directory.
2. ``saltblob serve`` on the store (a fresh RocksDB store by default; --store for another), a bucket, and the files
   uploaded with s3fs: the same blobs (keys ``s3/o/BUCKET/...``) are then read through the server and directly.
3. Rounds (--rounds, order rotating each round): each reader reads the whole dataset with pandas
   (``pd.read_parquet`` of the directory) and with pyarrow (``pyarrow.dataset(...).to_table()``), warm (the page
   cache and the store's caches as the previous read left them; one untimed read first) and cold (before each
   read, the machine's page cache is emptied through /proc/sys/vm/drop_caches when this process may (root), or
   else the dataset's files, or the store's, are evicted from it with posix_fadvise; the store is opened again and
   the server started again: nothing of a previous read is cached; a cql:// store's node keeps its own caches).
   "cold_eviction" in the JSON says which. Local reads are pyarrow's own local file system (pandas and pyarrow by path).

Per reader, API and temperature: the median seconds over the rounds, throughput (dataset MiB / s), the client's CPU
seconds (this process) and the server's; then the ratios saltblob ÷ local and saltblob ÷ serve+s3fs (of
throughputs: above 1 is faster), with their goals (≥ 0.8 and ≥ 2). ``--combine A.json B.json ...`` reads nothing and
prints the median and range of each ratio, and of each read's client CPU seconds, over several runs' JSON files.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import s3fs

import saltblob
from saltblob.fsspec import SaltblobFileSystem

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "s3"))

from saltblob_server import Server  # noqa: E402

MIB = 1 << 20
BUCKET = "fsspec-bench"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
ROW_GROUP = 1 << 20
GOALS = {"local": 0.8, "s3fs": 2.0}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--saltblob", help="the saltblob binary (for `saltblob serve`); needed unless --combine")
    p.add_argument("--store", help="store URL; default: a fresh embedded store in a temporary directory")
    p.add_argument("--size-mib", type=int, default=1024, help="dataset size on disk, about (default 1024)")
    p.add_argument("--files", type=int, default=8, help="parquet files (default 8)")
    p.add_argument("--rounds", type=int, default=3, help="rounds of every read (default 3)")
    p.add_argument("--dir", help="scratch directory (default: a temporary one, removed at the end)")
    p.add_argument("--row-group", type=int, default=ROW_GROUP,
                   help=f"rows per row group, and at least per file (default {ROW_GROUP})")
    p.add_argument("--no-drop-caches", action="store_true",
                   help="cold reads evict with posix_fadvise even when the whole page cache could be emptied")
    p.add_argument("--json", help="write the results as JSON to FILE")
    p.add_argument("--combine", nargs="+", metavar="JSON",
                   help="read nothing: the median and range over these runs' JSON files of each ratio and each "
                        "read's client CPU seconds")
    args = p.parse_args()
    if not args.combine and not args.saltblob:
        p.error("--saltblob is needed unless --combine")
    return args


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process PID so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def write_dataset(root: Path, size_mib: int, files: int, row_group: int) -> int:
    """FILES parquet files of about SIZE_MIB in all under ROOT, row groups of ROW_GROUP rows; returns the rows."""
    root.mkdir(parents=True)
    rows_per_file = max(row_group, int(size_mib * MIB / 18 / files))  # ~18 bytes per row as stored
    rng = np.random.default_rng(62)
    categories = pa.array([f"category-{i:03d}" for i in range(200)])
    for f in range(files):
        start = f * rows_per_file
        table = pa.table({
            "id": pa.array(np.arange(start, start + rows_per_file, dtype=np.int64)),
            "value": pa.array(rng.random(rows_per_file)),
            "amount": pa.array(rng.integers(0, 1 << 31, rows_per_file, dtype=np.int32)),
            "category": pa.DictionaryArray.from_arrays(
                pa.array(rng.integers(0, 200, rows_per_file, dtype=np.int32)), categories),
        })
        pq.write_table(table, root / f"part-{f:03d}.parquet", row_group_size=row_group, compression="snappy")
    return rows_per_file * files


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def can_drop_caches() -> bool:
    """Whether this process may empty the machine's page cache (root, /proc/sys writable): tried once, for real."""
    os.sync()
    try:
        DROP_CACHES.write_text("1\n")
    except OSError:
        return False
    return True


def evict(paths: List[Path], drop_caches: bool) -> None:
    """Empties the page cache: the whole machine's (DROP_CACHES, when DROP_CACHES is allowed: the Python modules
    and the saltblob binary are then read again too, as in a fresh process), or else the pages of every file under
    PATHS (posix_fadvise DONTNEED, clean ones: everything was synced first)."""
    os.sync()
    if drop_caches:
        DROP_CACHES.write_text("1\n")
        return
    for base in paths:
        for p in [base] if base.is_file() else base.rglob("*"):
            if p.is_file():
                fd = os.open(p, os.O_RDONLY)
                try:
                    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                finally:
                    os.close(fd)


def store_dir(url: str) -> Optional[Path]:
    """The directory of an embedded store's URL."""
    if not url.startswith("rocksdb://"):
        return None
    return Path(url[len("rocksdb://"):].split("?", 1)[0])


class Readers:
    """The three readers of the dataset: local files, saltblob:// and serve + s3fs."""

    def __init__(self, args: argparse.Namespace, local: Path, store_url: str, scratch: Path) -> None:
        self.args, self.local, self.store_url, self.scratch = args, local, store_url, scratch
        self.server: Optional[Server] = None
        self.fs: Optional[SaltblobFileSystem] = None
        self.prefix = f"s3/o/{BUCKET}/ds"
        self.drop_caches = not args.no_drop_caches and can_drop_caches()

    # The server and the store take turns: an embedded store is open in one process at a time.
    def start_server(self) -> Server:
        self.close_store()
        if self.server is None:
            self.server = Server(self.args.saltblob, self.store_url, self.scratch / "serve.log").start()
        return self.server

    def stop_server(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None

    def s3(self) -> s3fs.S3FileSystem:
        srv = self.start_server()
        return s3fs.S3FileSystem(
            key=srv.access_key, secret=srv.secret_key, skip_instance_cache=True,
            client_kwargs={"endpoint_url": srv.endpoint, "region_name": "us-east-1"},
            config_kwargs={"s3": {"addressing_style": "path"}},
        )

    def saltblob_fs(self) -> SaltblobFileSystem:
        self.stop_server()
        if self.fs is None:
            self.fs = SaltblobFileSystem(store=self.store_url, skip_instance_cache=True)
        return self.fs

    def close_store(self) -> None:
        if self.fs is not None:
            self.fs.store.close()
            self.fs = None

    def upload(self) -> None:
        s3 = self.s3()
        s3.mkdir(BUCKET)
        t0 = time.perf_counter()
        s3.put(str(self.local) + "/", f"{BUCKET}/ds/", recursive=True)
        print(f"== uploaded through serve + s3fs in {time.perf_counter() - t0:.1f} s", flush=True)

    def cold(self, reader: str) -> None:
        """Nothing of a previous read cached for READER."""
        if reader == "local":
            evict([self.local], self.drop_caches)
            return
        self.close_store()
        self.stop_server()
        d = store_dir(self.store_url)
        evict([d] if d is not None else [], self.drop_caches)

    def read(self, reader: str, api: str) -> Dict[str, Any]:
        """One timed read of the whole dataset by READER with API; seconds, CPU seconds, rows."""
        if reader == "local":
            fs: Any = None
            path = str(self.local)
        elif reader == "saltblob":
            fs = self.saltblob_fs()
            path = self.prefix
        else:
            fs = self.s3()
            path = f"{BUCKET}/ds"
        server_pid = self.server.process.pid if reader == "s3fs" and self.server else None
        server0 = cpu_seconds(server_pid) if server_pid else 0.0
        cpu0, t0 = time.process_time(), time.perf_counter()
        if api == "pandas":
            rows = len(pd.read_parquet(path, filesystem=fs) if fs is not None else pd.read_parquet(path))
        else:
            rows = ds.dataset(path, filesystem=fs, format="parquet").to_table().num_rows
        seconds = time.perf_counter() - t0
        return {"seconds": seconds, "client_cpu_s": time.process_time() - cpu0,
                "server_cpu_s": (cpu_seconds(server_pid) - server0) if server_pid else None, "rows": rows}


def median(xs: List[float]) -> float:
    return statistics.median(xs)


def combine(paths: List[str]) -> None:
    """Prints, over the runs whose JSON files are PATHS, the median and range of each saltblob ratio and of each
    read's client CPU seconds, and each run's load average at its start."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    print(f"{len(runs)} runs; load average (1, 5, 15 min) at each start: "
          + "; ".join(" ".join(f"{x:.1f}" for x in r["loadavg_1_5_15"]["start"]) for r in runs))

    def spread(xs: List[float], digits: int = 2) -> str:
        return f"{median(xs):.{digits}f} ({min(xs):.{digits}f}–{max(xs):.{digits}f})"

    print(f"\n{'read':<24} {'MiB/s, median (range)':>28} {'client CPU s, median (range)':>30}")
    for name in runs[0]["summary"]["medians"]:
        of = [r["summary"]["medians"][name] for r in runs]
        print(f"{name:<24} {spread([m['mib_s'] for m in of], 0):>28} {spread([m['client_cpu_s'] for m in of]):>30}")
    print(f"\n{'saltblob ÷':<24} {'ratio, median (range)':>28}  goal")
    for name, goal_of in ((n, n.split("/")[0]) for n in runs[0]["summary"]["saltblob_over"]):
        xs = [r["summary"]["saltblob_over"][name] for r in runs]
        goal = runs[0]["summary"]["goals"][goal_of]
        mark = "met" if median(xs) >= goal else "not met"
        print(f"{'÷ ' + name:<24} {spread(xs):>28}  ≥ {goal} ({mark} by the median; {sum(x >= goal for x in xs)} of "
              f"{len(xs)} runs)")


def main() -> None:
    args = parse_args()
    if args.combine:
        combine(args.combine)
        return
    scratch = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="saltblob-fsspec-bench."))
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        run(args, scratch)
    finally:
        if not args.dir:
            shutil.rmtree(scratch, ignore_errors=True)


def run(args: argparse.Namespace, scratch: Path) -> None:
    for name in ("rounds", "files", "size_mib", "row_group"):
        if getattr(args, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be at least 1")
    local = scratch / "local"
    store_url = args.store or f"rocksdb://{scratch}/store"
    t0 = time.perf_counter()
    rows = write_dataset(local, args.size_mib, args.files, args.row_group)
    size = sum(p.stat().st_size for p in local.iterdir())
    print(f"== dataset: {args.files} files, {rows} rows, {size / MIB:.0f} MiB, written in "
          f"{time.perf_counter() - t0:.1f} s", flush=True)
    load_start = os.getloadavg()
    readers = Readers(args, local, store_url, scratch)
    eviction = "drop_caches" if readers.drop_caches else "posix_fadvise"
    print(f"== cold reads: the page cache emptied by {eviction}", flush=True)
    results: Dict[str, List[Dict[str, Any]]] = {}
    try:
        readers.upload()
        order = ["local", "saltblob", "s3fs"]
        for r in range(args.rounds):
            turn = order[r % 3:] + order[:r % 3]
            print(f"== round {r + 1} of {args.rounds}: {' '.join(turn)}", flush=True)
            for temperature in ("warm", "cold"):
                for reader in turn:
                    for api in ("pandas", "pyarrow"):
                        name = f"{reader}/{api}/{temperature}"
                        if temperature == "warm":
                            readers.read(reader, api)  # untimed: caches as a previous read leaves them
                        else:
                            readers.cold(reader)
                        one = readers.read(reader, api)
                        assert one["rows"] == rows, (name, one["rows"], rows)
                        results.setdefault(name, []).append(one)
                        print(f"   {name:<24} {one['seconds']:7.2f} s  {size / MIB / one['seconds']:8.1f} MiB/s  "
                              f"client CPU {one['client_cpu_s']:6.2f} s"
                              + (f"  server CPU {one['server_cpu_s']:6.2f} s" if one["server_cpu_s"] else ""),
                              flush=True)
    finally:
        readers.stop_server()
        readers.close_store()
    summary = summarize(results, size)
    out = {"store": saltblob.redact_url(store_url), "files": args.files, "rows": rows, "bytes": size,
           "rounds": args.rounds, "cold_eviction": eviction, "cpus": os.cpu_count(),
           "loadavg_1_5_15": {"start": load_start, "end": os.getloadavg()}, "runs": results, "summary": summary}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


def summarize(results: Dict[str, List[Dict[str, Any]]], size: int) -> Dict[str, Any]:
    """Medians per read, and the ratios of saltblob's throughput to the others'."""
    med: Dict[str, Dict[str, Any]] = {}
    for name, runs in results.items():
        seconds = median([r["seconds"] for r in runs])
        server = [r["server_cpu_s"] for r in runs if r["server_cpu_s"] is not None]
        med[name] = {"seconds": seconds, "mib_s": size / MIB / seconds,
                     "client_cpu_s": median([r["client_cpu_s"] for r in runs]),
                     "server_cpu_s": median(server) if server else None}
    print(f"\n{'read':<24} {'median s':>9} {'MiB/s':>8} {'client CPU s':>13} {'server CPU s':>13}")
    for name, m in med.items():
        print(f"{name:<24} {m['seconds']:9.2f} {m['mib_s']:8.1f} {m['client_cpu_s']:13.2f} "
              + (f"{m['server_cpu_s']:13.2f}" if m["server_cpu_s"] is not None else f"{'':>13}"))
    ratios: Dict[str, float] = {}
    print(f"\n{'saltblob ÷':<10} {'api':<8} {'temp':<5} {'ratio':>6}  goal")
    for other in ("local", "s3fs"):
        for api in ("pandas", "pyarrow"):
            for temperature in ("warm", "cold"):
                a, b = med[f"saltblob/{api}/{temperature}"], med[f"{other}/{api}/{temperature}"]
                ratio = a["mib_s"] / b["mib_s"]
                ratios[f"{other}/{api}/{temperature}"] = ratio
                mark = "met" if ratio >= GOALS[other] else "not met"
                print(f"{other:<10} {api:<8} {temperature:<5} {ratio:6.2f}  ≥ {GOALS[other]} ({mark})")
    return {"medians": med, "saltblob_over": ratios, "goals": GOALS}


if __name__ == "__main__":
    main()
