"""The conventions Python code written for files and object stores expects: the standard library's exception
classes, copy/rename/exists/delete_many, delimiter listings with page tokens, several ranges in one call, a writer
that is a full ``io.BufferedIOBase``, stores that pickle and survive ``fork``, and ``from saltblob import *``
without ``open``."""

from __future__ import annotations

import csv
import errno
import io
import multiprocessing
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pytest

import saltblob
from conftest import CQL, OPTIONS
from test_encryption import write_keyring
from test_store import body


def test_exceptions_are_the_standard_librarys_too() -> None:
    assert issubclass(saltblob.NotFound, FileNotFoundError) and issubclass(saltblob.NotFound, KeyError)
    assert saltblob.NotFound("x").errno == errno.ENOENT
    assert issubclass(saltblob.AlreadyExists, FileExistsError)
    assert issubclass(saltblob.AlreadyExists, saltblob.PreconditionFailed)
    assert issubclass(saltblob.Unavailable, OSError) and not issubclass(saltblob.Unavailable, TimeoutError)
    assert issubclass(saltblob.TimedOut, saltblob.Unavailable) and issubclass(saltblob.TimedOut, TimeoutError)
    assert issubclass(saltblob.KeyUnavailable, saltblob.Unavailable)
    assert str(saltblob.NotFound("not found: k")) == "not found: k"


def test_not_found_is_caught_as_file_not_found(store: saltblob.Store, ns: str) -> None:
    with pytest.raises(FileNotFoundError):
        store.get(ns + "missing")
    with pytest.raises(FileNotFoundError):
        store.open_reader(ns + "missing")
    store.put(ns + "k", b"x")
    with pytest.raises(FileExistsError):
        store.put(ns + "k", b"y", if_absent=True)


def test_unreachable_backend_is_an_os_error() -> None:
    with pytest.raises(OSError) as e:
        saltblob.open("cql://127.0.0.1:1/nothing_here?connect_timeout=1s")
    assert isinstance(e.value, saltblob.Unavailable)


@pytest.mark.skipif(not CQL, reason="TEST_CQL is not set")
def test_a_backend_timeout_is_a_timeout_error(cql_url: str) -> None:
    with saltblob.open(cql_url) as s:
        s.put("warm", b"x")
    # Conditional puts (a Paxos round each) against a client timeout of 1 ms: some of them time out (a few in a
    # hundred on an idle node).
    with pytest.raises(TimeoutError) as e:
        with saltblob.open(cql_url + "?request_timeout=1ms") as s:
            for i in range(1000):
                s.put(f"slow{i}", b"x", if_absent=True)
    assert isinstance(e.value, saltblob.TimedOut) and isinstance(e.value.retryable, bool)


def test_exists_copy_rename(store: saltblob.Store, ns: str) -> None:
    data = body(300_000, 7)
    src = store.put(ns + "src", data, content_type="x/y", metadata={"a": "b"})
    assert store.exists(ns + "src") and not store.exists(ns + "nothing")
    copied = store.copy(ns + "src", ns + "dst")
    assert copied.version != src.version and copied.digest == src.digest
    assert copied.content_type == "x/y" and copied.metadata == {"a": "b"}
    assert store.get(ns + "dst").bytes() == data
    with pytest.raises(saltblob.AlreadyExists):
        store.copy(ns + "src", ns + "dst", overwrite=False)
    with pytest.raises(saltblob.NotFound):
        store.copy(ns + "nothing", ns + "x")
    moved = store.rename(ns + "dst", ns + "moved")
    assert not store.exists(ns + "dst") and store.head(ns + "moved") == moved
    assert store.get(ns + "moved").bytes() == data


def test_copy_and_rename_async(store: saltblob.Store, ns: str) -> None:
    import asyncio

    async def run() -> None:
        await store.put_async(ns + "a", b"abc")
        assert await store.exists_async(ns + "a")
        await store.copy_async(ns + "a", ns + "b")
        await store.rename_async(ns + "b", ns + "c")
        assert not await store.exists_async(ns + "b")
        assert await store.get_range_async(ns + "c", 1) == b"bc"
        assert await store.delete_many_async([ns + "a", ns + "c", ns + "none"]) != []

    asyncio.run(run())


def test_copy_with_a_customer_key(store: saltblob.Store, ns: str) -> None:
    key = os.urandom(32)
    store.put(ns + "sealed", b"secret" * 1000, customer_key=key)
    with pytest.raises(saltblob.KeyUnavailable):
        store.copy(ns + "sealed", ns + "copy")
    m = store.copy(ns + "sealed", ns + "copy", customer_key=key)
    assert m.encryption_provider == "customer"
    assert store.get(ns + "copy", customer_key=key).bytes() == b"secret" * 1000


def test_delete_many(store: saltblob.Store, ns: str) -> None:
    versions = [store.put(f"{ns}d{i}", b"x").version for i in range(40)]
    deleted = store.delete_many([f"{ns}d{i}" for i in range(40)] + [ns + "absent"])
    assert deleted == versions + [None]
    assert list(store.list(ns)) == []
    with pytest.raises(TypeError, match="not one key"):
        store.delete_many(ns + "d0")


def test_list_with_delimiter_and_page_tokens(store: saltblob.Store, ns: str) -> None:
    keys = [f"{ns}top{i}" for i in range(5)] + [f"{ns}dir{d}/f{i}" for d in range(4) for i in range(30)]
    keys += [f"{ns}dir1/sub/x", f"{ns}dir3/sub/y"]
    for k in keys:
        store.put(k, b"v")
    page = store.list_with_delimiter(ns)
    assert [e.key.decode() for e in page.entries] == sorted(f"{ns}top{i}" for i in range(5))
    assert page.common_prefixes == [f"{ns}dir{d}/".encode() for d in range(4)]
    assert page.next_token is None
    assert store.list_with_delimiter(f"{ns}dir1/").common_prefixes == [f"{ns}dir1/sub/".encode()]
    # Pages of 3 items: prefixes and blobs count alike, and the tokens resume where a page ended.
    items, token, pages = [], None, 0
    while True:
        p = store.list_page(ns, delimiter="/", limit=3, page_token=token)
        assert len(p.entries) + len(p.common_prefixes) <= 3
        items += [e.key for e in p.entries] + list(p.common_prefixes)
        pages += 1
        token = p.next_token
        if token is None:
            break
    assert sorted(items) == sorted([k.encode() for k in keys if "top" in k] + page.common_prefixes)
    assert pages >= 3
    # Without a delimiter: every key, page by page.
    seen, token = [], None
    while True:
        p = store.list_page(ns, limit=50, page_token=token)
        seen += [e.key.decode() for e in p.entries]
        token = p.next_token
        if token is None:
            break
    assert seen == sorted(keys)
    with pytest.raises(saltblob.InvalidArgument, match="page_token"):
        store.list_page(ns, page_token="nonsense")


def test_get_ranges(store: saltblob.Store, ns: str) -> None:
    data = body(700_000, 3)
    m = store.put(ns + "r", data, chunk_size=65536)
    starts, ends = [0, 10, 600_000, 5, 100_000, 700_000], [10, 20, 700_000, 5, 300_000, 700_000]
    got = store.get_ranges(ns + "r", starts, ends)
    assert got == [data[s:e] for s, e in zip(starts, ends)]
    assert store.get_ranges(ns + "r", [1, 50], lengths=[2, 3]) == [data[1:3], data[50:53]]
    assert store.get_ranges(ns + "r", [0], [4], if_version=m.version) == [data[:4]]
    store.put(ns + "r", b"new")
    with pytest.raises(saltblob.PreconditionFailed):
        store.get_ranges(ns + "r", [0], [2], if_version=m.version)
    with pytest.raises(saltblob.RangeNotSatisfiable):
        store.get_ranges(ns + "r", [0], [10])
    with pytest.raises(saltblob.InvalidArgument, match="ends"):
        store.get_ranges(ns + "r", [2], [1])
    with pytest.raises(saltblob.InvalidArgument, match="ends/lengths"):
        store.get_ranges(ns + "r", [0, 1], [1])


def test_get_ranges_async(store: saltblob.Store, ns: str) -> None:
    import asyncio

    data = body(3_000_000, 4)
    m = store.put(ns + "ra", data, chunk_size=65536)

    async def run() -> None:
        got = await store.get_ranges_async(ns + "ra", [0, 10, 2_000_000], [10, 20, 3_000_000])
        assert got == [data[:10], data[10:20], data[2_000_000:]]
        # One range, small (read with its manifest) and large (copied on the I/O threads): a list of one.
        assert await store.get_ranges_async(ns + "ra", [7], lengths=[100]) == [data[7:107]]
        assert await store.get_ranges_async(ns + "ra", [1], [2_999_999], if_version=m.version) == [data[1:2_999_999]]
        assert await store.get_ranges_async(ns + "ra", [5], [5]) == [b""]
        with pytest.raises(saltblob.RangeNotSatisfiable):
            await store.get_ranges_async(ns + "ra", [0], [3_000_001])
        with pytest.raises(saltblob.NotFound):
            await store.get_ranges_async(ns + "missing", [0], [1])
        store.put(ns + "ra", b"new")
        with pytest.raises(saltblob.PreconditionFailed):
            await store.get_ranges_async(ns + "ra", [0], [2_000_000], if_version=m.version)
        with pytest.raises(saltblob.PreconditionFailed):
            await store.get_ranges_async(ns + "ra", [0], [2], if_version=m.version)

    asyncio.run(run())


def test_writer_is_a_buffered_io_base(store: saltblob.Store, ns: str) -> None:
    w = store.open_writer(ns + "csv", content_type="text/csv")
    assert isinstance(w, io.BufferedIOBase) and w.writable() and not w.readable() and not w.seekable()
    with io.TextIOWrapper(w, encoding="utf-8", newline="") as text:
        writer = csv.writer(text)
        writer.writerows([["a", "b"], ["1", "2"]])
    assert w.closed and w.manifest is not None and w.manifest.content_type == "text/csv"
    assert store.get(ns + "csv").bytes() == b"a,b\r\n1,2\r\n"
    with store.open_writer(ns + "lines") as w2:
        w2.writelines([b"x\n", memoryview(b"y\n")])
        assert w2.tell() == 4
    assert store.get(ns + "lines").bytes() == b"x\ny\n"
    with pytest.raises(io.UnsupportedOperation):
        store.open_writer(ns + "other").fileno()


def test_an_unclosed_writer_commits_nothing(store: saltblob.Store, ns: str) -> None:
    w = store.open_writer(ns + "dropped")
    w.write(b"partial")
    del w
    import gc

    gc.collect()
    assert not store.exists(ns + "dropped")


def test_star_import_leaves_open_alone() -> None:
    scope: dict[str, Any] = {}
    exec("from saltblob import *", scope)
    assert "open" not in scope and "Store" in scope and "NotFound" in scope
    assert set(saltblob.__all__) <= set(dir(saltblob))


def test_a_store_pickles_as_its_url(rocksdb_url: str) -> None:
    with saltblob.open(rocksdb_url, **OPTIONS) as store:
        store.put("k", b"v")
        again = pickle.loads(pickle.dumps(store))
        assert again is store  # the same process has it open: the same store
    # Closed: unpickling opens it again, with the same options.
    data = pickle.dumps(store)
    reopened = pickle.loads(data)
    try:
        assert reopened is not store and reopened.get("k").bytes() == b"v"
    finally:
        reopened.close()


def test_a_pickled_store_without_its_keyring_raises_the_key_error(tmp_path: Path) -> None:
    ring = tmp_path / "keys.ring"
    write_keyring(ring, [("tenant", 1)])
    url = f"rocksdb://{tmp_path}/db?encryption=local&keyring={ring}&encryption_key=tenant"
    with saltblob.open(url) as store:
        store.put("k", b"sealed")
        data = pickle.dumps(store)
    shutil.move(str(ring), str(tmp_path / "elsewhere"))
    with pytest.raises(saltblob.SaltblobError, match="keyring|keys.ring"):
        pickle.loads(data)


def _read_inherited(store: saltblob.Store, key: str, out: Any) -> None:
    try:
        store.get(key)
        out.put("no error")
    except Exception as e:  # what the child saw, for the parent to check
        out.put(f"{type(e).__name__}: {e}")


def _read_unpickled(data: bytes, key: str, out: Any) -> None:
    try:
        out.put(pickle.loads(data).get(key).bytes())
    except Exception as e:
        out.put(f"{type(e).__name__}: {e}")


def _in_fork_child(target: Any, *args: Any) -> Any:
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    p = ctx.Process(target=target, args=(*args, out))
    p.start()
    try:
        return out.get(timeout=60)
    finally:
        p.join(30)
        assert p.exitcode == 0


def test_an_inherited_store_is_refused_after_fork(store: saltblob.Store, ns: str) -> None:
    store.put(ns + "k", b"v")
    seen = _in_fork_child(_read_inherited, store, ns + "k")
    assert seen.startswith("InvalidArgument") and "fork" in seen and "spawn" in seen
    # The parent's store is untouched.
    assert store.get(ns + "k").bytes() == b"v"


def test_a_pickled_store_in_a_fork_child(store: saltblob.Store, ns: str) -> None:
    store.put(ns + "k", b"v")
    seen = _in_fork_child(_read_unpickled, pickle.dumps(store), ns + "k")
    if store.url.startswith("rocksdb:"):
        # One process at a time: a clear error, not a hang, and the parent's store goes on.
        assert isinstance(seen, str) and "InvalidArgument" in seen and "one process at a time" in seen
    else:
        assert seen == b"v"
    assert store.get(ns + "k").bytes() == b"v"
