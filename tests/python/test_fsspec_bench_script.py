"""scripts/python-fsspec-bench.py, the saltblob:// ÷ local files ÷ serve+s3fs comparison, run tiny on a temporary
RocksDB store: every reader reads every row, warm and cold, each round; the summary's medians and ratios are those of
the runs, and --combine gives each ratio's median and range over several runs. Needs the saltblob binary
(``SALTBLOB_BIN``, set by scripts/python-tests.sh) for ``saltblob serve``."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "python-fsspec-bench.py"


def test_every_reader_reads_every_row_and_the_ratios_are_of_the_medians(tmp_path: Path) -> None:
    binary = os.environ.get("SALTBLOB_BIN")
    if not binary:
        pytest.skip("SALTBLOB_BIN is not set (the saltblob binary, for `saltblob serve`)")
    out = tmp_path / "bench.json"
    # --no-drop-caches: the suite does not empty the machine's page cache, whoever runs it.
    subprocess.run([sys.executable, str(SCRIPT), "--saltblob", binary, "--size-mib", "1", "--files", "2",
                    "--row-group", "5000", "--rounds", "2", "--no-drop-caches", "--dir", str(tmp_path / "scratch"),
                    "--json", str(out)], check=True, timeout=600, stdout=subprocess.DEVNULL)
    result = json.loads(out.read_text())
    assert result["cold_eviction"] == "posix_fadvise"
    assert result["files"] == 2 and result["rows"] >= 10_000 and result["bytes"] > 0
    names = {f"{reader}/{api}/{temp}" for reader in ("local", "saltblob", "s3fs") for api in ("pandas", "pyarrow")
             for temp in ("warm", "cold")}
    assert set(result["runs"]) == names
    medians = result["summary"]["medians"]
    for name, runs in result["runs"].items():
        assert len(runs) == 2 and all(r["rows"] == result["rows"] for r in runs)
        assert all((r["server_cpu_s"] is not None) == name.startswith("s3fs/") for r in runs)
        assert medians[name]["seconds"] == statistics.median(r["seconds"] for r in runs)
    for key, ratio in result["summary"]["saltblob_over"].items():
        other, api, temp = key.split("/")
        ours, theirs = medians[f"saltblob/{api}/{temp}"], medians[f"{other}/{api}/{temp}"]
        assert ratio == pytest.approx(ours["mib_s"] / theirs["mib_s"])
    # --combine over runs: each ratio's median and range (here twice the same run: the range is one value).
    combined = subprocess.run([sys.executable, str(SCRIPT), "--combine", str(out), str(out)], check=True,
                              capture_output=True, text=True, timeout=120).stdout
    for key, ratio in result["summary"]["saltblob_over"].items():
        line = next(li for li in combined.splitlines() if li.startswith(f"÷ {key} "))
        assert f"{ratio:.2f} ({ratio:.2f}–{ratio:.2f})" in line and "of 2 runs" in line, line


def test_bad_sizes_are_refused() -> None:
    for flag in ("--rounds", "--files", "--size-mib", "--row-group"):
        p = subprocess.run([sys.executable, str(SCRIPT), "--saltblob", "/nonexistent/saltblob", flag, "0"],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode != 0 and f"{flag} must be at least 1" in p.stderr, p.stderr
