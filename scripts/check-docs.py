#!/usr/bin/env python3
"""Checks the documentation a user reads first, so that it cannot rot unnoticed.

  python3 scripts/check-docs.py --saltblob PATH   # every check, the quick start run with that binary
  python3 scripts/check-docs.py --self-test       # each check must fail on a broken case

The checks:
- README.md fits on a few screens: at most MAX_README_LINES lines.
- Every relative link in README.md, BENCHMARKS.md, CHANGELOG.md and docs/**/*.md names a file or folder that exists, and a
  `#anchor` into a Markdown file names one of its headings (GitHub's anchor rule).
- The README's quick start (the first ```sh block under "## Quick start") runs as written, command by command,
  in an empty directory, with the given `saltblob` first on PATH: a command that fails fails the check.
- docs/saltblob.service passes `systemd-analyze verify` without a warning (its ExecStart pointed at the binary),
  and is the unit docs/operations.md shows.

Exit code 0 when every check passes, 1 otherwise; each failure is one line naming the file and what is wrong.
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_README_LINES = 200
QUICK_START_HEADING = "## Quick start"
UNIT = Path("docs/saltblob.service")
# The binary the unit's ExecStart names, replaced by the one under test when verifying.
UNIT_BINARY = "/usr/local/bin/saltblob"
# Longest any one quick-start command may run before the check fails.
COMMAND_TIMEOUT_S = 120
# Whether each quick-start command is printed as it passes (not in the self-test).
VERBOSE = True

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def markdown_files(root: Path) -> list[Path]:
    files = [root / "README.md", root / "BENCHMARKS.md", root / "CHANGELOG.md"]
    files += sorted((root / "docs").rglob("*.md")) if (root / "docs").is_dir() else []
    return [f for f in files if f.is_file()]


def prose_lines(text: str) -> list[str]:
    """The lines of `text` outside fenced code blocks."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors_of(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in prose_lines(path.read_text(encoding="utf-8")):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = anchor(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def check_links(root: Path) -> list[str]:
    problems = []
    for md in markdown_files(root):
        for line in prose_lines(md.read_text(encoding="utf-8")):
            for target in LINK.findall(line):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("<"):
                    continue  # a URL (http:, mailto:, ...), not a file of the repository
                path, _, frag = target.partition("#")
                dest = md if not path else (md.parent / path)
                if not dest.exists():
                    problems.append(f"{md.relative_to(root)}: link to {target}: no such file")
                    continue
                if frag and dest.suffix == ".md" and frag not in anchors_of(dest):
                    problems.append(f"{md.relative_to(root)}: link to {target}: no heading with that anchor")
    return problems


def check_readme_length(root: Path) -> list[str]:
    lines = (root / "README.md").read_text(encoding="utf-8").count("\n")
    if lines > MAX_README_LINES:
        return [f"README.md: {lines} lines, more than {MAX_README_LINES}: move facts to their guide in docs/"]
    return []


def quick_start(root: Path) -> list[str]:
    """The commands of the README's quick start, one per line (comments and blank lines dropped)."""
    text = (root / "README.md").read_text(encoding="utf-8").splitlines()
    try:
        start = next(i for i, line in enumerate(text) if line.startswith(QUICK_START_HEADING))
    except StopIteration:
        return []
    commands, inside = [], False
    for line in text[start + 1 :]:
        if line.startswith("## "):
            break
        if line.strip().startswith("```"):
            if inside:
                break
            inside = line.strip() in ("```sh", "```bash", "```shell")
            continue
        if inside and line.strip() and not line.strip().startswith("#"):
            commands.append(line.strip())
    return commands


def check_quick_start(root: Path, saltblob: Path) -> list[str]:
    commands = quick_start(root)
    if not commands:
        return [f"README.md: no ```sh block under {QUICK_START_HEADING!r}"]
    bin_dir = Path(tempfile.mkdtemp(prefix="saltblob-docs-bin."))
    work = Path(tempfile.mkdtemp(prefix="saltblob-quick-start."))
    try:
        # The name users type, whatever the binary under test is called.
        os.symlink(saltblob.resolve(), bin_dir / "saltblob")
        env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
        env.pop("SALTBLOB_STORE", None)
        for n, command in enumerate(commands, 1):
            try:
                done = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", command],
                    cwd=work, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S,
                )
            except subprocess.TimeoutExpired:
                return [f"README.md quick start, command {n} ({command}): still running after {COMMAND_TIMEOUT_S} s"]
            if done.returncode != 0:
                err = (done.stderr or done.stdout).strip().splitlines()
                return [f"README.md quick start, command {n} ({command}): exit code {done.returncode}: "
                        f"{err[-1] if err else 'no output'}"]
            if VERBOSE:
                print(f"  ok  {command}")
        return []
    finally:
        shutil.rmtree(work, ignore_errors=True)
        shutil.rmtree(bin_dir, ignore_errors=True)


def check_unit(root: Path, saltblob: Path) -> list[str]:
    unit = root / UNIT
    if not unit.is_file():
        return [f"{UNIT}: missing"]
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        return [f"{UNIT}: systemd-analyze not found (Debian package systemd; scripts/prereqs.sh installs it)"]
    text = unit.read_text(encoding="utf-8")
    guide = root / "docs" / "operations.md"
    if guide.is_file():
        shown = re.search(r"^```ini\n(.*?)^```", guide.read_text(encoding="utf-8"), re.S | re.M)
        if shown is None or shown.group(1) != text:
            return [f"{UNIT}: differs from the unit docs/operations.md shows (keep the two the same)"]
    if UNIT_BINARY not in text:
        return [f"{UNIT}: ExecStart does not run {UNIT_BINARY}"]
    with tempfile.TemporaryDirectory(prefix="saltblob-unit.") as tmp:
        copy = Path(tmp) / unit.name
        copy.write_text(text.replace(UNIT_BINARY, str(saltblob.resolve())), encoding="utf-8")
        done = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, timeout=60)
    said = (done.stdout + done.stderr).strip()
    if done.returncode != 0 or said:
        return [f"{UNIT}: systemd-analyze verify: exit code {done.returncode}: {said or 'no output'}"]
    return []


def run_checks(root: Path, saltblob: Path | None) -> list[str]:
    problems = check_readme_length(root) + check_links(root)
    if saltblob is not None:
        problems += check_quick_start(root, saltblob) + check_unit(root, saltblob)
    return problems


def self_test() -> int:
    """Each check against a tree made to break it: every case must be caught, and a good tree must pass."""
    global VERBOSE
    VERBOSE = False
    failures = 0
    true_bin = Path(shutil.which("true") or "/bin/true")
    good_unit = (ROOT / UNIT).read_text(encoding="utf-8")

    def tree(readme: str, docs: dict[str, str], unit: str = good_unit) -> Path:
        root = Path(tempfile.mkdtemp(prefix="saltblob-docs-selftest."))
        (root / "docs").mkdir()
        (root / "README.md").write_text(readme, encoding="utf-8")
        for name, text in docs.items():
            (root / "docs" / name).write_text(text, encoding="utf-8")
        (root / UNIT).write_text(unit, encoding="utf-8")
        return root

    good_readme = "# x\n\nSee [the guide](docs/guide.md#second-part).\n\n## Quick start\n\n```sh\ntrue\necho ok\n```\n"
    good_docs = {"guide.md": "# Guide\n\n## Second part\n\nBack to [the README](../README.md).\n"}
    cases = [
        ("a good tree passes", tree(good_readme, good_docs), True),
        ("a README over the limit", tree(good_readme + "line\n" * MAX_README_LINES, good_docs), False),
        ("a link to a missing file", tree(good_readme.replace("guide.md#", "gone.md#"), good_docs), False),
        ("a link to a missing anchor", tree(good_readme.replace("second-part", "third-part"), good_docs), False),
        ("a quick-start command that fails", tree(good_readme.replace("echo ok", "false"), good_docs), False),
        ("no quick start", tree(good_readme.replace("## Quick start", "## Later"), good_docs), False),
        ("a unit with a typo", tree(good_readme, good_docs, good_unit.replace("ExecStart=", "ExecStrat=")), False),
        ("a unit that differs from the one the guide shows",
         tree(good_readme, {**good_docs, "operations.md": "# Ops\n\n```ini\n[Unit]\n```\n"}), False),
        ("a unit the guide shows as it is",
         tree(good_readme, {**good_docs, "operations.md": f"# Ops\n\n```ini\n{good_unit}```\n"}), True),
        ("a unit with a bad value", tree(good_readme, good_docs, good_unit.replace("Type=simple", "Type=simpel")),
         False),
    ]
    for name, root, should_pass in cases:
        problems = run_checks(root, true_bin)
        shutil.rmtree(root, ignore_errors=True)
        if (not problems) != should_pass:
            failures += 1
            print(f"self-test FAILED: {name}: {problems or 'nothing found'}")
        else:
            print(f"self-test ok: {name}")
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--saltblob", type=Path, help="the saltblob binary the quick start and the unit use")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if args.saltblob is not None and not os.access(args.saltblob, os.X_OK):
        print(f"check-docs: {args.saltblob} is not an executable; build it first (cargo build --release -p saltblob-cli)")
        return 1
    problems = run_checks(ROOT, args.saltblob)
    for p in problems:
        print(f"check-docs: {p}")
    print(f"check-docs: {'FAILED' if problems else 'ok'} ({len(markdown_files(ROOT))} Markdown files)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
