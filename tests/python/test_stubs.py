"""The type stubs of the native module checked against it (``mypy.stubtest``: every name, class and signature of
``saltblob._saltblob`` as the stubs say), and the package's Python half type-checked against the stubs
(``mypy --strict``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ALLOWLIST = Path(__file__).with_name("stubtest-allowlist.txt")


def _run(tmp_path: Path, *args: str) -> None:
    """``python -m ARGS`` in TMP_PATH (its caches go there), which must succeed."""
    run = subprocess.run([sys.executable, "-m", *args], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr


def test_stubs_match_the_native_module(tmp_path: Path) -> None:
    _run(tmp_path, "mypy.stubtest", "saltblob._saltblob", "--allowlist", str(ALLOWLIST))


def test_the_package_type_checks(tmp_path: Path) -> None:
    _run(tmp_path, "mypy", "--strict", "-p", "saltblob")
