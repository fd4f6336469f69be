"""scripts/python-bench.py, the speed-from-Python comparison, run small on a temporary RocksDB store: its rounds
alternate which side goes first, and its comparison is of the medians with each round's ratio. Needs the saltblob
binary (``SALTBLOB_BIN``, set by scripts/python-tests.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "python-bench.py"


def test_rounds_alternate_and_ratios_are_of_the_medians(tmp_path: Path) -> None:
    binary = os.environ.get("SALTBLOB_BIN")
    if not binary:
        pytest.skip("SALTBLOB_BIN is not set (the saltblob binary, for `saltblob bench`)")
    out = tmp_path / "bench.json"
    subprocess.run([sys.executable, str(SCRIPT), "--saltblob", binary, "--store", f"rocksdb://{tmp_path}/db",
                    "--count", "1", "--large-mb", "2", "--small-kb", "256", "--concurrency", "2", "--rounds", "3",
                    "--json", str(out)], check=True, timeout=300, stdout=subprocess.DEVNULL)
    result = json.loads(out.read_text())
    assert [r["first"] for r in result["rounds"]] == ["python", "rust", "python"]
    phases = ["large_write", "large_read", "small_write", "small_read"]
    assert [row["phase"] for row in result["comparison"]] == phases
    for row in result["comparison"]:
        assert len(row["per_round"]) == 3
        python = sorted(next(p for p in r["python"] if p["name"] == row["phase"])["throughput_mib_s"]
                        for r in result["rounds"])
        rust = sorted(next(p for p in r["rust"]["phases"] if p["name"] == row["phase"])["throughput_mib_s"]
                      for r in result["rounds"])
        assert row["python_mib_s"] == python[1] and row["rust_mib_s"] == rust[1]
        assert row["python_over_rust"] == pytest.approx(python[1] / rust[1])
    # Python's own phase: large gets through asyncio, with the event loop's longest stall per get.
    for r in result["rounds"]:
        names = [p["name"] for p in r["python"]]
        assert names == ["large_write", "large_read", "large_read_async", "small_write", "small_read"]
        stall = r["python"][2]["details"]["loop_stall_ms"]
        assert r["python"][2]["ops"] == 1 and 0 <= stall["p50"] <= stall["max"]


def test_bad_rounds_and_a_reference_without_cql_are_refused(tmp_path: Path) -> None:
    for args, message in ((["--rounds", "0"], "--rounds must be at least 1"),
                          (["--reference", "x.py"], "--reference needs a cql:// store")):
        p = subprocess.run([sys.executable, str(SCRIPT), "--saltblob", "/nonexistent/saltblob", *args],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode != 0 and message in p.stderr


def test_the_reference_scripts_change_exactly_their_one_import() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("python_reference", SCRIPT.parent / "python-reference.py")
    assert spec is not None and spec.loader is not None
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    source = ("import os\nfrom salted_blob_store import DEFAULT_MAX_CONCURRENCY, SaltedBlobStore\n"
              "x = 'from salted_blob_store import'\n")
    changed = ref.with_saltblob(source)
    assert changed == source.replace("from salted_blob_store import DEFAULT",
                                     "from saltblob.compat import DEFAULT", 1)
    for bad in ("import os\n", "from salted_blob_store import A\nfrom salted_blob_store import B\n"):
        with pytest.raises(SystemExit, match="exactly one line"):
            ref.with_saltblob(bad)


def test_the_large_reads_script_reads_back_what_it_put() -> None:
    p = subprocess.run([sys.executable, str(SCRIPT.parent / "python-large-reads.py"), "--count", "2", "--size-mb", "5"],
                       capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(p.stdout)
    for phase in ("bytes", "bytes_async", "get_range_async"):
        assert len(result[phase]["get_ms"]) == 2
        assert result[phase]["median_ms"] > 0 and result[phase]["cpu"]["system_s"] >= 0
    for phase in ("bytes_async", "get_range_async"):
        assert len(result[phase]["loop_stall_ms"]) == 2
    bad = subprocess.run([sys.executable, str(SCRIPT.parent / "python-large-reads.py"), "--count", "0"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "at least 1" in bad.stderr
