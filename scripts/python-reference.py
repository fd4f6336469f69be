#!/usr/bin/env python3
"""The salting article's own Python scripts (ScyllaDB code samples, chunking-large-cells/python: demo.py and
benchmark.py, with salted_blob_store.py beside them, fetched by you into DIR; they are not part of saltblob) run
twice each on the same Cassandra/ScyllaDB node: as they are, on the article's class, and with their one import
changed to `from saltblob.compat import ...`, on saltblob. Nothing else in them is changed: the script checks
that exactly one line differs. Prints each run's output and exit code, and the throughputs benchmark.py reports;
exits 1 when a run on saltblob fails (a failed run of the article's class is reported, not an error here).

Run from the Python tests' virtual environment (it has the package and cassandra-driver), best through
`scripts/python-tests.sh --reference-scripts DIR [-- ARGS]`:

  --cql HOST:PORT        the node (default 127.0.0.1:9042)
  --benchmark-args ARGS  benchmark.py's arguments (default: 5 blobs of 60 MiB, large case only, the keyspace dropped
                         at the end; --store-concurrency 8, since its default, 0, sends a blob's batches at once
                         and one driver connection refuses them as overloaded)
  --json FILE            the results as JSON
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Dict, List

ORIGINAL = "from salted_blob_store import"
CHANGED = "from saltblob.compat import"
DEFAULT_BENCHMARK_ARGS = "--count 5 --large-mb 60 --skip-small --cleanup --store-concurrency 8"


def with_saltblob(source: str) -> str:
    """SOURCE with its one import of the article's module changed to saltblob.compat; nothing else."""
    lines = source.splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.startswith(ORIGINAL)]
    if len(hits) != 1:
        raise SystemExit(f"expected exactly one line starting with {ORIGINAL!r}, found {len(hits)}")
    lines[hits[0]] = CHANGED + lines[hits[0]][len(ORIGINAL):]
    return "".join(lines)


def run(script: Path, args: List[str]) -> Dict[str, Any]:
    print(f"== {script.name} {' '.join(args)}", flush=True)
    p = subprocess.run([sys.executable, str(script), *args], cwd=script.parent, capture_output=True, text=True,
                       timeout=1800)
    print(p.stdout + p.stderr, flush=True)
    # benchmark.py reports each timed case as "done in T  (X MiB/s)": the large write, then the large read.
    rates = [float(x) for x in re.findall(r"done in [^(]*\(([\d.]+) MiB/s\)", p.stdout)]
    return {"exit_code": p.returncode, "mib_s": rates, "output_tail": (p.stdout + p.stderr)[-2000:]}


def drop_keyspaces(host: str, port: int, keyspaces: List[str]) -> None:
    """Drops KEYSPACES, which a script that failed midway leaves behind."""
    from cassandra.cluster import Cluster  # type: ignore[import-untyped]

    cluster = Cluster(contact_points=[host], port=port, protocol_version=4)
    try:
        session = cluster.connect()
        for ks in keyspaces:
            session.execute(f"DROP KEYSPACE IF EXISTS {ks}")
    finally:
        cluster.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", required=True, help="the directory holding demo.py, benchmark.py, salted_blob_store.py")
    ap.add_argument("--cql", default="127.0.0.1:9042")
    ap.add_argument("--benchmark-args", default=DEFAULT_BENCHMARK_ARGS)
    ap.add_argument("--json")
    args = ap.parse_args()
    host, port = args.cql.rsplit(":", 1)
    work = Path(tempfile.mkdtemp(prefix="saltblob-reference."))
    try:
        for name in ("demo.py", "benchmark.py", "salted_blob_store.py"):
            if not (Path(args.dir) / name).is_file():
                raise SystemExit(f"{name} is not in {args.dir}")
            shutil.copy(Path(args.dir) / name, work / name)
        results: Dict[str, Any] = {}
        for name, extra in (("demo", ["--large-mb", "60", "--cleanup"]),
                            ("benchmark", shlex.split(args.benchmark_args))):
            original = work / f"{name}.py"
            changed = work / f"{name}_saltblob.py"
            changed.write_text(with_saltblob(original.read_text()))
            common = ["--contact-points", host, "--port", port]
            results[name] = {
                "article": run(original, [*common, "--keyspace", f"ref_{name}_article", *extra]),
                "saltblob": run(changed, [*common, "--keyspace", f"ref_{name}_saltblob", *extra]),
            }
        drop_keyspaces(host, int(port), [f"ref_{name}_{cls}" for name in results for cls in ("article", "saltblob")])
        print("script      class     exit  MiB/s (benchmark.py: large write, large read)")
        for name, pair in results.items():
            for cls, r in pair.items():
                print(f"{name:<11} {cls:<9} {r['exit_code']:>4}  {' '.join(f'{x:.1f}' for x in r['mib_s'])}")
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        # The article's runs are data (its class can be refused by the driver as "overloaded"); saltblob's must end.
        if any(results[name]["saltblob"]["exit_code"] for name in results):
            sys.exit(1)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
