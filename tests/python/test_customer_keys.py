"""Customer keys from Python (S3's SSE-C): ``customer_key=`` on a put seals the value under the caller's 32 bytes,
which are never stored; every read (``get``, ``get_range``, ``open_reader`` and their ``_async`` twins) must give
the same key again, and without it, or with another, raises ``KeyUnavailable``. No key provider is needed, so this
runs on every store of the ``store`` fixture (RocksDB, and Cassandra with ``TEST_CQL``)."""

from __future__ import annotations

import asyncio
import os

import pytest

import saltblob

# Inline, one partition and salted with the fixtures' 64 KiB fan-out threshold.
SIZES = {"inline": 100, "chunked": 50_000, "salted": 300_000}


def test_sealed_values_read_back_with_their_key_only(store: saltblob.Store, ns: str) -> None:
    key, other = os.urandom(32), os.urandom(32)
    for name, size in SIZES.items():
        value = os.urandom(size)
        manifest = store.put(ns + name, value, customer_key=key)
        assert manifest.encryption_provider == "customer"
        assert manifest.encryption_key == store.customer_key_id(key)
        # The manifest is readable without the key: it says which key the bytes need.
        assert store.head(ns + name).encryption_key == store.customer_key_id(key)

        assert store.get(ns + name, customer_key=key).bytes() == value
        assert store.get_range(ns + name, 7, size - 3, customer_key=key) == value[7 : size - 3]
        with store.open_reader(ns + name, customer_key=key) as reader:
            reader.seek(size // 2)
            assert reader.read() == value[size // 2 :]

        for wrong in (None, other):
            with pytest.raises(saltblob.KeyUnavailable, match="customer") as raised:
                store.get(ns + name, customer_key=wrong).bytes()
            assert not raised.value.retryable
            if wrong is None:  # the message says how to give the key from Python
                assert "customer_key=" in str(raised.value), raised.value
            with pytest.raises(saltblob.KeyUnavailable):
                store.get_range(ns + name, 0, 10, customer_key=wrong)
            with pytest.raises(saltblob.KeyUnavailable):
                with store.open_reader(ns + name, customer_key=wrong) as reader:
                    reader.read(10)


def test_a_key_for_a_value_not_sealed_under_one_is_refused(store: saltblob.Store, ns: str) -> None:
    """As S3 refuses SSE-C headers on a plaintext object: a key given where none was used may mean the caller
    believes the value is sealed under it. The value reads without one."""
    key = os.urandom(32)
    for name, value in (("small", b"plain"), ("large", os.urandom(2_000_000))):
        store.put(ns + name, value)
        with pytest.raises(saltblob.InvalidArgument, match="not sealed under a customer key"):
            store.get(ns + name, customer_key=key)
        with pytest.raises(ValueError):
            store.get_range(ns + name, 0, 3, customer_key=key)

        async def read_range(name: str = name) -> bytes:
            return await store.get_range_async(ns + name, 0, 3, customer_key=key)

        with pytest.raises(saltblob.InvalidArgument):
            asyncio.run(read_range())
        assert store.get(ns + name).bytes() == value


def test_async_twins_and_writers_take_the_key(store: saltblob.Store, ns: str) -> None:
    key = bytearray(os.urandom(32))  # a bytearray is a key too, the same as its bytes
    value = os.urandom(200_000)

    async def run() -> None:
        m = await store.put_async(ns + "a", value, customer_key=key)
        assert m.encryption_key == store.customer_key_id(bytes(key))
        result = await store.get_async(ns + "a", customer_key=bytes(key))
        assert await result.bytes_async() == value
        assert await store.get_range_async(ns + "a", suffix=1000, customer_key=key) == value[-1000:]
        async with await store.open_reader_async(ns + "a", customer_key=key) as reader:
            assert await reader.read(5000) == value[:5000]
        with pytest.raises(saltblob.KeyUnavailable):
            await (await store.get_async(ns + "a")).bytes_async()
        async with store.open_writer_async(ns + "w", customer_key=key) as w:
            await w.write(value[:70_000])
            await w.write(value[70_000:])

    asyncio.run(run())
    with store.open_writer(ns + "s", customer_key=key) as w:
        w.write(value)
    for name in ("w", "s"):
        assert store.head(ns + name).encryption_provider == "customer"
        assert store.get(ns + name, customer_key=key).bytes() == value
        with pytest.raises(saltblob.KeyUnavailable):
            store.get(ns + name).bytes()


def test_a_new_version_under_another_key_needs_that_key(store: saltblob.Store, ns: str) -> None:
    first, second = os.urandom(32), os.urandom(32)
    store.put(ns + "k", b"one" * 30_000, customer_key=first)
    store.put(ns + "k", b"two" * 30_000, customer_key=second)
    assert store.get(ns + "k", customer_key=second).bytes() == b"two" * 30_000
    with pytest.raises(saltblob.KeyUnavailable):
        store.get(ns + "k", customer_key=first).bytes()
    # A plaintext version after them reads without a key, and says it is plaintext.
    plain = store.put(ns + "k", b"three")
    assert plain.encryption_key is None and plain.encryption_provider is None
    assert store.get(ns + "k").bytes() == b"three"


def test_bad_keys_are_refused_before_any_io(store: saltblob.Store, ns: str) -> None:
    with pytest.raises(saltblob.InvalidArgument, match="customer_key.*5 bytes") as raised:
        store.put(ns + "short", b"x", customer_key=b"short")
    assert isinstance(raised.value, ValueError)
    with pytest.raises(TypeError, match="customer_key"):
        store.put(ns + "str", b"x", customer_key="a" * 32)
    with pytest.raises(saltblob.InvalidArgument, match="one of them"):
        store.put(ns + "both", b"x", customer_key=os.urandom(32), encryption_key="tenant")
    for name in ("short", "str", "both"):
        with pytest.raises(saltblob.NotFound):
            store.head(ns + name)

    store.put(ns + "k", b"v" * 1000, customer_key=os.urandom(32))
    with pytest.raises(TypeError, match="customer_key"):
        store.get(ns + "k", customer_key=12)
    with pytest.raises(saltblob.InvalidArgument, match="customer_key"):
        store.get_range(ns + "k", 0, 1, customer_key=b"\0" * 33)
    with pytest.raises(saltblob.InvalidArgument, match="customer_key"):
        store.open_reader(ns + "k", customer_key=b"")
    with pytest.raises(TypeError, match="customer_key"):
        store.open_writer(ns + "w", customer_key=[1, 2])


def test_fingerprints_name_keys_and_nothing_else() -> None:
    a, b = os.urandom(32), os.urandom(32)
    assert saltblob.customer_key_id(a) == saltblob.customer_key_id(bytearray(a))
    assert saltblob.customer_key_id(a) != saltblob.customer_key_id(b)
    fingerprint = saltblob.customer_key_id(a)
    assert len(fingerprint) == 32 and int(fingerprint, 16) >= 0
    assert a.hex() not in fingerprint
    with pytest.raises(saltblob.InvalidArgument, match="customer_key"):
        saltblob.customer_key_id(b"x" * 31)
