"""The synchronous API on each store: round trips of any size and key (hypothesis), ranges, head, delete, list,
describe, gc, fsck, conditional puts, streamed puts of files and iterators, streamed gets."""

from __future__ import annotations

import array
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import saltblob

# Sizes around the layouts: inline (up to 16 KiB), chunked in one partition, salted (the stores' fan-out threshold
# is 64 KiB, conftest.OPTIONS).
sizes = st.one_of(
    st.integers(0, 64),
    st.integers(16 * 1024 - 2, 16 * 1024 + 2),
    st.integers(0, 400_000),
)
keys = st.one_of(
    st.binary(min_size=1, max_size=200),
    st.text(min_size=1, max_size=100),
)
slow_settings = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def body(n: int, seed: int) -> bytes:
    """``n`` bytes that differ by position and seed (not compressible to nothing, and every chunk distinct)."""
    unit = bytes((i * 131 + seed) & 0xFF for i in range(251))
    return (unit * (n // 251 + 1))[:n]


@slow_settings
@given(key=keys, size=sizes, seed=st.integers(0, 255), chunk=st.sampled_from([None, 4096, 65536]))
def test_round_trip_any_size_and_key(store: saltblob.Store, ns: str, key: bytes | str, size: int, seed: int,
                                     chunk: int | None) -> None:
    full = (ns.encode() + key) if isinstance(key, bytes) else ns + key
    data = body(size, seed)
    m = store.put(full, data, chunk_size=chunk, max_salt=7)
    assert m.size == size
    got = store.get(full)
    assert got.manifest == m
    assert got.bytes() == data
    # The same bytes through every other read path.
    assert b"".join(store.get(full).stream(10_000)) == data
    assert b"".join(store.get(full).chunks()) == data
    assert store.head(full).digest == m.digest
    if size:
        start, end = size // 3, size - size // 5
        assert store.get_range(full, start, end) == data[start:end]
        assert store.get_range(full, suffix=min(size, 5000)) == data[-min(size, 5000):]


def test_str_key_is_its_utf8_bytes(store: saltblob.Store, ns: str) -> None:
    store.put(ns + "clé", b"v")
    assert store.get((ns + "clé").encode()).bytes() == b"v"
    assert [e.key for e in store.list(ns)] == [(ns + "clé").encode()]


def test_buffers_files_and_iterators(store: saltblob.Store, ns: str) -> None:
    data = body(300_000, 7)
    store.put(ns + "ba", bytearray(data))
    store.put(ns + "mv", memoryview(data)[1000:])
    store.put(ns + "arr", array.array("B", data))
    store.put(ns + "file", io.BytesIO(data))
    store.put(ns + "iter", (data[i:i + 7000] for i in range(0, len(data), 7000)))
    assert store.get(ns + "ba").bytes() == data
    assert store.get(ns + "mv").bytes() == data[1000:]
    assert store.get(ns + "arr").bytes() == data
    assert store.get(ns + "file").bytes() == data
    assert store.get(ns + "iter").bytes() == data


def test_options_metadata_and_describe(store: saltblob.Store, ns: str) -> None:
    data = body(200_000, 1)
    m = store.put(ns + "k", data, content_type="application/x-test", metadata={"a": "b"}, chunk_size="16KiB",
                  max_salt=4, codec="zstd")
    assert (m.content_type, m.metadata, m.chunk_size, m.codec) == ("application/x-test", {"a": "b"}, 16384, "zstd")
    d = store.describe(ns + "k")
    assert d.key == (ns + "k").encode() and d.manifest == m
    assert m.layout == "salted" and d.layout == "salted"
    assert sum(d.bytes_per_salt) == m.size
    assert len(d.bytes_per_salt) == m.salt_count > 1


def test_conditional_put_and_delete(store: saltblob.Store, ns: str) -> None:
    k = ns + "c"
    first = store.put(k, b"one", if_absent=True)
    with pytest.raises(saltblob.AlreadyExists):
        store.put(k, b"two", if_absent=True)
    second = store.put(k, b"two", if_version=first.version)
    with pytest.raises(saltblob.PreconditionFailed):
        store.put(k, b"three", if_version=first.version)
    with pytest.raises(saltblob.PreconditionFailed):
        store.delete(k, if_version=first.version)
    assert store.delete(k, if_version=second.version) == second.version
    assert store.delete(k) is None
    with pytest.raises(saltblob.NotFound):
        store.head(k)


def test_list_is_lazy_and_ordered(store: saltblob.Store, ns: str) -> None:
    names = [f"{ns}{i:05d}" for i in range(1500)]
    for n in names:
        store.put(n, b"x")
    store.put(ns[:-1] + "~other", b"y")
    it = store.list(ns)
    first = next(it)
    assert first.key == names[0].encode() and first.manifest is not None and first.error is None
    rest = [e.key.decode() for e in it]
    assert [names[0]] + rest == names


def test_gc_and_fsck_reports(store: saltblob.Store, ns: str) -> None:
    store.put(ns + "a", body(100_000, 3))
    store.put(ns + "a", body(100_000, 4))
    report = store.gc(dry_run=True, prefix=ns)
    assert report["dry_run"] is True and report["reclaimed_versions"] == 0
    f = store.fsck(prefix=ns)
    assert f["blobs"] == 1 and f["bytes"] == 100_000 and f["damaged"] == []
    index = f["index"]
    if store.url.startswith("cql://"):
        assert index is not None and index["name"] == "listing index"
        assert (index["manifests"], index["entries"], index["missing"], index["stale"]) == (1, 1, [], 0)
    else:
        assert index is None, "RocksDB's manifests are their own index"


def test_a_blob_with_a_ttl_expires_and_gc_deletes_it(store: saltblob.Store, ns: str) -> None:
    import datetime
    import time

    m = store.put(ns + "t", body(20_000, 5), ttl=1.5)
    assert m.expires_micros is not None and m.expires_micros - m.created_micros == 1_500_000
    assert store.head(ns + "t").expires_micros == m.expires_micros
    store.put(ns + "k", b"kept", ttl=datetime.timedelta(days=30))
    with pytest.raises(saltblob.InvalidArgument, match="ttl"):
        store.put(ns + "z", b"x", ttl=0)
    with pytest.raises(TypeError, match="ttl"):
        store.put(ns + "z", b"x", ttl="1h")
    time.sleep(2.0)
    with pytest.raises(saltblob.NotFound):
        store.get(ns + "t")
    assert [e.key for e in store.list(ns)] == [(ns + "k").encode()]
    report = store.gc(prefix=ns)
    assert report["expired"] == 1
    assert store.get(ns + "k").bytes() == b"kept"


def test_stream_pieces_are_at_least_chunk_size(store: saltblob.Store, ns: str) -> None:
    data = body(1_000_000, 9)
    store.put(ns + "s", data, chunk_size=65536)
    pieces = list(store.get(ns + "s").stream(200_000))
    assert all(len(p) >= 200_000 for p in pieces[:-1]) and b"".join(pieces) == data
    result = store.get(ns + "s")
    result.bytes()
    with pytest.raises(saltblob.InvalidArgument, match="already taken"):
        result.bytes()


def test_closed_store_refuses(rocksdb_url: str) -> None:
    s = saltblob.open(rocksdb_url)
    s.put("k", b"v")
    s.close()
    assert s.closed
    with pytest.raises(saltblob.InvalidArgument, match="closed"):
        s.get("k")
    # Closing released the embedded store: it opens again.
    with saltblob.open(rocksdb_url) as again:
        assert again.get("k").bytes() == b"v"


def test_memory_store() -> None:
    with saltblob.open("memory://") as s:
        s.put(b"k", b"v" * 100_000)
        assert s.get(b"k").bytes() == b"v" * 100_000
