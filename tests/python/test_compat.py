"""``saltblob.compat.SaltedBlobStore`` driven as a program written for the salting article's class drives it: a
cassandra-driver session, create_schema, small / medium / large blobs written with their own max_salt and
chunk_size, read back and digest-checked, described, a missing key, a delete, drop_schema. On TEST_CQL only."""

from __future__ import annotations

import hashlib
import itertools
from typing import Iterator

import pytest

import saltblob
from saltblob.compat import (
    DEFAULT_CHUNK_SIZE,
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_MAX_CONCURRENCY,
    DEFAULT_MAX_SALT,
    BlobLayout,
    PartitionInfo,
    SaltedBlobStore,
)

cassandra_cluster = pytest.importorskip("cassandra.cluster")


@pytest.fixture
def session(cql_url: str) -> Iterator[object]:
    host, port = cql_url[len("cql://"):].split("/")[0].rsplit(":", 1)
    cluster = cassandra_cluster.Cluster(contact_points=[host], port=int(port), protocol_version=4)
    s = cluster.connect()
    yield s
    cluster.shutdown()


def keyspace_of(url: str) -> str:
    return url.rsplit("/", 1)[1]


def payload(seed: bytes, size: int) -> bytes:
    return hashlib.shake_256(seed).digest(size)


def test_constants() -> None:
    assert (DEFAULT_CHUNK_SIZE, DEFAULT_MAX_SALT, DEFAULT_MAX_BATCH_BYTES, DEFAULT_MAX_CONCURRENCY) == (
        4096, 100, 1 << 20, 0)
    assert BlobLayout(2, 2, [PartitionInfo(0, 1, 5), PartitionInfo(1, 1, 3)]).total_bytes == 8


def test_demo_flow_with_a_driver_session(session: object, cql_url: str) -> None:
    ks = keyspace_of(cql_url)
    store = SaltedBlobStore(session, keyspace=ks, table="blobs")
    store.create_schema(replication={"class": "SimpleStrategy", "replication_factor": 1})
    cases = [
        (b"small", 2 * 1024, 1, 4096),
        (b"medium", 256 * 1024 + 5000, 8, 4096),  # 66 chunks: salts 0 and 1 hold one more
        (b"large", 6 * 1024 * 1024 + 123, 100, 64 * 1024),
    ]
    for key, size, max_salt, chunk_size in cases:
        blob = payload(key, size)
        assert store.write(key, blob, max_salt=max_salt, chunk_size=chunk_size,
                           max_concurrency=DEFAULT_MAX_CONCURRENCY) is None
        chunks = store.read(key, max_concurrency=DEFAULT_MAX_CONCURRENCY)
        assert chunks is not None
        total_chunks = -(-size // chunk_size)
        assert len(chunks) == total_chunks and all(len(c) == chunk_size for c in chunks[:-1])
        h = hashlib.sha256()
        for c in chunks:
            h.update(c)
        assert h.digest() == hashlib.sha256(blob).digest()
        assert bytes(itertools.chain.from_iterable(chunks)) == blob
        layout = store.describe(key)
        assert layout is not None
        salts = min(total_chunks, max_salt)
        assert (layout.total_chunks, layout.salt_cardinality, layout.total_bytes) == (total_chunks, salts, size)
        assert [p.salt for p in layout.partitions] == list(range(salts))
        # Chunk i is in salt i % salts, as in the article.
        assert [p.rows for p in layout.partitions] == [len(range(s, total_chunks, salts)) for s in range(salts)]
        assert [p.bytes for p in layout.partitions] == [
            sum(len(chunks[i]) for i in range(s, total_chunks, salts)) for s in range(salts)]

    assert store.read(b"does-not-exist") is None
    assert store.describe(b"does-not-exist") is None
    store.delete(b"does-not-exist")
    store.delete(b"medium")
    assert store.read(b"medium") is None
    store.write(b"empty", b"")
    assert store.read(b"empty") == []
    assert store.describe(b"empty") == BlobLayout(0, 1, [PartitionInfo(0, 0, 0)])

    # The blobs are saltblob's: the same keyspace through the package sees them.
    with saltblob.open(cql_url) as direct:
        assert direct.get(b"large").bytes() == payload(b"large", 6 * 1024 * 1024 + 123)
        assert direct.head(b"large").salt_count == 97

    # A program's own tables in the keyspace (the article's benchmark adds one) live beside saltblob's.
    session.execute(f"CREATE TABLE IF NOT EXISTS {ks}.small_blobs (key blob PRIMARY KEY, data blob)")
    store.drop_schema()
    rows = session.execute("SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = %s", (ks,))
    assert rows.one() is None


def test_bad_tuning_values_raise_value_error_before_io() -> None:
    # Nothing listens on port 1: a write that did I/O would raise RuntimeError, not ValueError.
    store = SaltedBlobStore("cql://127.0.0.1:1", keyspace="nowhere")
    for kwargs in ({"max_salt": 0}, {"chunk_size": 0}, {"max_batch_bytes": 0}, {"max_concurrency": -1},
                   {"chunk_size": 8192, "max_batch_bytes": 4096}):
        with pytest.raises(ValueError):
            store.write(b"k", b"v", **kwargs)
    with pytest.raises(TypeError, match="session"):
        SaltedBlobStore(object(), keyspace="ks")
    with pytest.raises(ValueError, match="session"):
        SaltedBlobStore("cql://127.0.0.1:9042/ks", keyspace="ks")


def test_failures_are_runtime_errors() -> None:
    store = SaltedBlobStore("cql://127.0.0.1:1", keyspace="nowhere")
    with pytest.raises(RuntimeError):
        store.read(b"k")


def test_url_instead_of_a_session(cql_url: str) -> None:
    base, ks = cql_url.rsplit("/", 1)
    store = SaltedBlobStore(base, keyspace=ks)
    store.create_schema()
    blob = payload(b"u", 100_000)
    store.write(b"u", blob, max_salt=3)
    assert b"".join(store.read(b"u") or []) == blob
    assert store.describe(b"u").salt_cardinality == 3
    store.drop_schema()
