"""File-like readers and writers: seek/read/readinto on demand, the writer's commit on close and nothing on an
exception, abort, and a put interrupted by Ctrl-C (KeyboardInterrupt) leaving the previous version current."""

from __future__ import annotations

import io
import signal
import time
from typing import Iterator

import pytest

import saltblob
from test_store import body


def test_reader_seek_read_readinto(store: saltblob.Store, ns: str) -> None:
    data = body(700_000, 5)
    m = store.put(ns + "r", data, chunk_size=65536)
    with store.open_reader(ns + "r") as r:
        assert r.readable() and r.seekable() and r.size == len(data) and r.manifest == m
        assert r.read(10) == data[:10] and r.tell() == 10
        assert r.seek(500_000) == 500_000
        assert r.read(100_000) == data[500_000:600_000]
        assert r.seek(-50, io.SEEK_END) == len(data) - 50
        assert r.read() == data[-50:]
        assert r.read(10) == b""
        r.seek(1000)
        r.seek(10, io.SEEK_CUR)
        buf = bytearray(70_000)
        assert r.readinto(buf) == 70_000 and bytes(buf) == data[1010:71_010]
        r.seek(len(data) + 10)
        assert r.read(5) == b""
    with pytest.raises(ValueError):
        r.read(1)
    # Through io.BufferedReader and line iteration, as any binary file.
    with io.BufferedReader(store.open_reader(ns + "r"), buffer_size=1 << 16) as br:
        assert br.read() == data


def test_reader_sees_an_overwrite(store: saltblob.Store, ns: str) -> None:
    store.put(ns + "o", body(300_000, 1), chunk_size=65536)
    r = store.open_reader(ns + "o")
    r.read(1000)
    store.put(ns + "o", body(300_000, 2), chunk_size=65536)
    r.seek(200_000)
    with pytest.raises(saltblob.PreconditionFailed, match="overwritten"):
        r.read(1000)


def test_writer_commits_on_close(store: saltblob.Store, ns: str) -> None:
    data = body(500_000, 3)
    with store.open_writer(ns + "w", content_type="x/y") as w:
        for i in range(0, len(data), 33_333):
            assert w.write(data[i:i + 33_333]) == len(data[i:i + 33_333])
    assert w.closed and w.manifest is not None and w.manifest.content_type == "x/y"
    assert store.get(ns + "w").bytes() == data


def test_writer_exception_commits_nothing(store: saltblob.Store, ns: str) -> None:
    store.put(ns + "w", b"previous")
    with pytest.raises(RuntimeError, match="boom"):
        with store.open_writer(ns + "w") as w:
            w.write(body(300_000, 4))
            raise RuntimeError("boom")
    assert w.closed and w.manifest is None
    assert store.get(ns + "w").bytes() == b"previous"
    with pytest.raises(RuntimeError):
        with store.open_writer(ns + "new") as w:
            w.write(b"x" * 100)
            raise RuntimeError("boom")
    with pytest.raises(saltblob.NotFound):
        store.head(ns + "new")


def test_writer_abort_and_drop(store: saltblob.Store, ns: str) -> None:
    w = store.open_writer(ns + "a")
    w.write(b"x" * 200_000)
    w.abort()
    with pytest.raises(saltblob.InvalidArgument, match="closed writer"):
        w.write(b"y")
    w2 = store.open_writer(ns + "a")
    w2.write(b"z" * 100)
    del w2  # dropped without close: nothing committed
    with pytest.raises(saltblob.NotFound):
        store.head(ns + "a")


def test_failing_iterator_keeps_previous_version(store: saltblob.Store, ns: str) -> None:
    store.put(ns + "i", b"previous")

    def pieces() -> Iterator[bytes]:
        yield b"a" * 100_000
        yield b"b" * 100_000
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.put(ns + "i", pieces())
    assert store.get(ns + "i").bytes() == b"previous"


def test_ctrl_c_during_a_long_put_keeps_previous_version(rocksdb_url: str) -> None:
    """A real SIGINT while a 256 MiB `put` runs in Rust without the GIL: the wait runs the signal handlers every
    50 ms, the handler's KeyboardInterrupt drops the put uncommitted, the previous version stays current."""
    data = bytes(256 << 20)
    with saltblob.open(rocksdb_url) as store:
        store.put("k", b"previous")
        old = signal.signal(signal.SIGALRM, signal.default_int_handler)
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        try:
            t0 = time.monotonic()
            with pytest.raises(KeyboardInterrupt):
                store.put("k", data)
            print(f"put interrupted after {time.monotonic() - t0:.3f} s")
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old)
        assert store.get("k").bytes() == b"previous"
        assert store.fsck()["damaged"] == []
