#!/usr/bin/env python3
"""The server's side of a `saltblob bench --mixed` run through `saltblob serve` (scripts/s3-isolation.sh): from
the server's access log, the small objects' GetObject and PutObject durations as the server measured them (from
the request's head to the end of its response), per phase of the bench that ran the large loops beside them.

Usage: scripts/s3-server-side.py SERVER_LOG [--json FILE]
       scripts/s3-server-side.py --check-smoke REPORT_JSON   (scripts/s3-isolation.sh --smoke: checks the bench's
                                                             JSON and the FILE.server-side.json written beside it)

A phase's window runs from the first large request of its loops to the end of the last (their keys name the
phase: `…/mixed-large/<phase>/…`); the small requests (keys `…/mixed/…`) that started and ended inside it are
counted. Set beside the bench's own figures (timed by its client from when each operation was due), the
difference is what the client and the connection added: the bench's `get_latency_ms` / `put_latency_ms` of a
paced side against `server_get_ms` / `server_put_ms` here.
"""

import argparse
import datetime
import json
import re
import sys

LINE = re.compile(
    r'^(?P<at>\S+Z)\s+INFO saltblob_server::access: request op="(?P<op>\w+)".*?key="(?P<key>[^"]*)"'
    r'.*?duration_ms=(?P<ms>[\d.]+) class="(?P<class>[\w-]+)"'
)
LARGE = re.compile(r"/mixed-large/([^/]+)/")


def requests(path):
    """(start, end, op, key, class) of every access-log line of PATH, in seconds since the epoch."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as log:
        for line in log:
            m = LINE.match(line)
            if not m:
                continue
            end = datetime.datetime.fromisoformat(m["at"].replace("Z", "+00:00")).timestamp()
            out.append((end - float(m["ms"]) / 1000, end, m["op"], m["key"], m["class"]))
    return out


def percentile(values, q):
    """Nearest-rank percentile of VALUES (seconds) in ms; None when empty."""
    if not values:
        return None
    values = sorted(values)
    return round(values[min(len(values) - 1, max(0, int(q * len(values) + 0.999999) - 1))] * 1000, 3)


def phases(reqs):
    """Per phase of the large loops, in the order they ran: its window and the small requests' figures."""
    windows = {}
    for start, end, _, key, _ in reqs:
        m = LARGE.search(key)
        if m:
            first, last = windows.get(m[1], (start, end))
            windows[m[1]] = (min(first, start), max(last, end))
    out = []
    for name, (first, last) in sorted(windows.items(), key=lambda kv: kv[1][0]):
        entry = {"phase": name, "seconds": round(last - first, 3)}
        for op, field in (("GetObject", "server_get_ms"), ("PutObject", "server_put_ms")):
            took = [e - s for s, e, o, k, _ in reqs if o == op and "/mixed/" in k and first <= s and e <= last]
            entry[field] = {"count": len(took), "p50": percentile(took, 0.5), "p99": percentile(took, 0.99)}
        out.append(entry)
    return out


def check_smoke(report_path):
    """The problems of a smoke run: a phase with a failed operation or none, a paced load not measured, no server
    side beside the large loops, a clean-up that left objects."""
    with open(report_path, encoding="utf-8") as f:
        report = json.load(f)
    with open(report_path + ".server-side.json", encoding="utf-8") as f:
        side = json.load(f)
    problems = [f"{p['name']}: {p['errors']} failed ({p['error_messages'][:1]})" for p in report["phases"] if p["errors"]]
    problems += [f"{p['name']} ran nothing" for p in report["phases"] if not p["ops"]]
    loads = [p["rho"] for p in report["isolation"]["paced"]]
    if loads != [0.25, 0.5]:
        problems.append(f"paced loads measured: {loads}, not [0.25, 0.5]")
    for rho in loads:
        phase = next((e for e in side if e["phase"] == f"paced_bulk_under_load_rho{rho}"), None)
        if not phase or not phase["server_get_ms"]["count"] or not phase["server_put_ms"]["count"]:
            problems.append(f"the server's log has no small get and put beside the large loops at rho = {rho}")
    if report["cleanup"]["problems"] or not report["cleanup"]["deleted_keys"]:
        problems.append(f"clean-up: {report['cleanup']}")
    return problems, len(report["phases"])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("log", nargs="?", help="the server's log (stderr of saltblob serve)")
    p.add_argument("--json", help="also write the figures to FILE")
    p.add_argument("--check-smoke", metavar="REPORT_JSON", help="check a smoke run's results instead")
    args = p.parse_args()
    if args.check_smoke:
        problems, phases_run = check_smoke(args.check_smoke)
        for problem in problems:
            print(f"s3-isolation smoke: {problem}", file=sys.stderr)
        print(f"== s3-isolation: smoke run {'failed' if problems else 'passed'}: {phases_run} phases through S3")
        return 1 if problems else 0
    if not args.log:
        p.error("give the server's log")
    found = phases(requests(args.log))
    if not found:
        print(f"no phase of large loops in {args.log}: is it the log of a bench run with --mixed?", file=sys.stderr)
        return 1
    print("the server's side (access log): small requests within each phase of the large loops, ms")
    for e in found:
        g, u = e["server_get_ms"], e["server_put_ms"]
        print(
            f"  {e['phase']:32} {e['seconds']:6.1f} s   gets {g['count']:6} P50 {g['p50']} P99 {g['p99']}"
            f"   puts {u['count']:6} P50 {u['p50']} P99 {u['p99']}"
        )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(found, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
