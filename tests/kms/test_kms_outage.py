"""A KMS outage seen through `saltblob serve`: plaintext requests keep their latency, sealed ones fail fast.

A proxy in front of the KMS emulator stops answering (connections accepted, requests read and dropped, kept-alive
connections included) while boto3 clients put and get plaintext objects and get SSE-KMS objects of a store that
caches no data key (`key_cache=0`: every sealed request asks the KMS). The test alternates phases with the KMS
answering and not, three of each, and asserts what must hold whatever the machine's load: every plaintext request
succeeds; every sealed request during an outage fails with a retryable answer (503) within the KMS call deadline
(800 ms) plus a margin for the request itself; sealed requests work again after the failure cache's time once the
KMS answers. It prints the plaintext P50/P99 of both kinds of phase and their ratio, and writes them as JSON to
$TEST_KMS_FIGURES when that is set (scripts/kms-tests.sh); the figures are recorded in BENCHMARKS.md, never
asserted (this machine is shared and noisy).

Run by scripts/kms-tests.sh (see test_s3_sse_kms.py for the environment).
"""

import json
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

import boto3
import botocore.exceptions
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "s3"))
import s3util  # noqa: E402
from s3util import make_client  # noqa: E402
from saltblob_server import Server  # noqa: E402

PHASE_S = 3
ROUNDS = 3
PLAIN_WORKERS = 4
SEALED_WORKERS = 4
OBJECT_BYTES = 20_000
# Each sealed worker sends at most one request per interval.
SEALED_INTERVAL_S = 0.05
# The server's KMS call deadline (`kms_timeout=`, 800 ms with its retries) and the failure cache
# (`key_failure_cache=`, 2 s), both left at their defaults here.
KMS_DEADLINE_S = 0.8
FAILURE_CACHE_S = 2.0
# What a sealed request may take beyond the KMS deadline to be answered: the request's own work and this
# process's threads (all of them share one interpreter lock).
ANSWER_MARGIN_S = 0.7


class Brownout:
    """A TCP proxy to TARGET (host, port) that forwards while `answering` and otherwise reads and drops what
    either side sends, keeping every connection open: a KMS that accepts and never answers."""

    def __init__(self, target):
        self.target = target
        self.answering = True
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client), daemon=True).start()

    def _pipe(self, source, sink):
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                if self.answering:
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.closed = True
        self.listener.close()


def required_env(name):
    return s3util.required_env(name, "scripts/kms-tests.sh")


@pytest.fixture(scope="module")
def outage(tmp_path_factory):
    endpoint = required_env("TEST_KMS_ENDPOINT")
    host, port = endpoint.removeprefix("http://").rsplit(":", 1)
    proxy = Brownout((host, int(port)))
    kms = boto3.client("kms", endpoint_url=endpoint, region_name="us-east-1")
    key = kms.create_key(Description="saltblob KMS outage test")["KeyMetadata"]["KeyId"]
    work = tmp_path_factory.mktemp("kms-outage")
    store = f"rocksdb://{work}/store?encryption=aws-kms&kms_endpoint={proxy.url}&key_cache=0"
    srv = Server(required_env("SALTBLOB_BIN"), store, work / "server.log").start()
    yield proxy, srv, key
    srv.stop()
    proxy.close()


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def test_plaintext_requests_keep_their_latency_and_sealed_ones_fail_fast_while_the_kms_is_down(outage):
    proxy, srv, key = outage
    setup = make_client(srv.endpoint, srv.access_key, srv.secret_key)
    setup.create_bucket(Bucket="outage")
    body = os.urandom(OBJECT_BYTES)
    for i in range(SEALED_WORKERS):
        setup.put_object(Bucket="outage", Key=f"sealed/{i}", Body=body, ServerSideEncryption="aws:kms",
                         SSEKMSKeyId=key)
    plain_clients = [make_client(srv.endpoint, srv.access_key, srv.secret_key) for _ in range(PLAIN_WORKERS)]
    sealed_clients = [make_client(srv.endpoint, srv.access_key, srv.secret_key) for _ in range(SEALED_WORKERS)]

    def plain(i, client, until, out):
        n = 0
        while time.monotonic() < until:
            k = f"plain/{i}/{n % 8}"
            t = time.monotonic()
            client.put_object(Bucket="outage", Key=k, Body=body)
            out["latencies"].append(time.monotonic() - t)
            t = time.monotonic()
            assert client.get_object(Bucket="outage", Key=k)["Body"].read() == body
            out["latencies"].append(time.monotonic() - t)
            n += 1

    def sealed(i, client, until, out):
        while time.monotonic() < until:
            t = time.monotonic()
            try:
                assert client.get_object(Bucket="outage", Key=f"sealed/{i}")["Body"].read() == body
                out["sealed_ok"].append(time.monotonic() - t)
            except botocore.exceptions.ClientError as e:
                meta = e.response["ResponseMetadata"]
                out["sealed_failed"].append((time.monotonic() - t, meta["HTTPStatusCode"],
                                             e.response["Error"]["Code"]))
            # Paced, so that the sealed load offered is the same whether its requests succeed or fail at once.
            time.sleep(max(0.0, SEALED_INTERVAL_S - (time.monotonic() - t)))

    def phase(answering):
        proxy.answering = answering
        out = {"latencies": [], "sealed_ok": [], "sealed_failed": []}
        until = time.monotonic() + PHASE_S
        errors = []

        def guarded(work, *args):
            try:
                work(*args)
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(repr(e))

        runners = [threading.Thread(target=guarded, args=(plain, i, c, until, out))
                   for i, c in enumerate(plain_clients)]
        runners += [threading.Thread(target=guarded, args=(sealed, i, c, until, out))
                    for i, c in enumerate(sealed_clients)]
        for r in runners:
            r.start()
        for r in runners:
            r.join(timeout=PHASE_S + 30)
        assert not any(r.is_alive() for r in runners), "a request of the phase did not finish within 30 s"
        assert not errors, f"plaintext requests failed (KMS answering: {answering}): {errors[:3]}"
        return out

    up, down = [], []
    for _ in range(ROUNDS):
        up.append(phase(True))
        # A new outage: sealed requests must first find the KMS mute (the deadline), then the failure cache.
        down.append(phase(False))
        # Back up: the failure cache ends, then sealed requests work again.
        proxy.answering = True
        time.sleep(FAILURE_CACHE_S + 0.5)

    assert all(p["sealed_ok"] and not p["sealed_failed"] for p in up), \
        [(len(p["sealed_ok"]), p["sealed_failed"][:3]) for p in up]
    failed = [f for p in down for f in p["sealed_failed"]]
    assert failed and not any(p["sealed_ok"] for p in down), [len(p["sealed_ok"]) for p in down]
    assert all(status == 503 for _, status, _ in failed), sorted({(s, c) for _, s, c in failed})
    slowest_failure = max(took for took, _, _ in failed)
    assert slowest_failure < KMS_DEADLINE_S + ANSWER_MARGIN_S, \
        f"a sealed request during the outage failed after {slowest_failure:.3f} s"
    assert setup.get_object(Bucket="outage", Key="sealed/0")["Body"].read() == body

    up_lat = [x for p in up for x in p["latencies"]]
    down_lat = [x for p in down for x in p["latencies"]]
    figures = {
        "plaintext_requests_up": len(up_lat),
        "plaintext_requests_down": len(down_lat),
        "plaintext_p50_ms_up": round(statistics.median(up_lat) * 1e3, 2),
        "plaintext_p50_ms_down": round(statistics.median(down_lat) * 1e3, 2),
        "plaintext_p99_ms_up": round(percentile(up_lat, 0.99) * 1e3, 2),
        "plaintext_p99_ms_down": round(percentile(down_lat, 0.99) * 1e3, 2),
        "sealed_failures_down": len(failed),
        "sealed_slowest_failure_ms": round(slowest_failure * 1e3, 1),
    }
    figures["plaintext_p99_down_over_up"] = round(figures["plaintext_p99_ms_down"] / figures["plaintext_p99_ms_up"], 3)
    print("kms outage:", json.dumps(figures, sort_keys=True))
    if out := os.environ.get("TEST_KMS_FIGURES"):
        Path(out).write_text(json.dumps(figures, sort_keys=True, indent=2) + "\n")
