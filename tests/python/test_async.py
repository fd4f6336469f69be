"""The asyncio API: every call's `_async` twin, many puts and gets at once on one event loop, async iterators in
and out, the async writer, cancellation."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

import pytest

import saltblob
from test_store import body

pytestmark = pytest.mark.asyncio


async def test_concurrent_puts_and_gets(store: saltblob.Store, ns: str) -> None:
    sizes = [0, 10, 20_000, 70_000, 300_000] * 10
    values = {f"{ns}{i}": body(n, i) for i, n in enumerate(sizes)}
    manifests = await asyncio.gather(*(store.put_async(k, v) for k, v in values.items()))
    assert [m.size for m in manifests] == sizes

    async def read(k: str) -> bytes:
        return await (await store.get_async(k)).bytes_async()

    got = await asyncio.gather(*(read(k) for k in values))
    assert got == list(values.values())
    # Puts and gets of the same keys interleaved: every get sees a whole version.
    updates = {k: body(len(v), 99) for k, v in values.items()}
    mixed = await asyncio.gather(*(store.put_async(k, v) for k, v in updates.items()),
                                 *(read(k) for k in values))
    for k, seen in zip(values, mixed[len(updates):]):
        assert seen in (values[k], updates[k])


async def test_every_async_twin(store: saltblob.Store, ns: str) -> None:
    data = body(400_000, 2)
    m = await store.put_async(ns + "a", data, chunk_size=65536)
    assert (await store.head_async(ns + "a")) == m
    assert (await store.get_range_async(ns + "a", 1000, 2000)) == data[1000:2000]
    d = await store.describe_async(ns + "a")
    assert d.manifest == m
    r = await store.get_async(ns + "a")
    assert b"".join([p async for p in r.stream(100_000)]) == data
    assert b"".join(await (await store.get_async(ns + "a")).chunks_async()) == data
    assert [e.key async for e in store.list_async(ns)] == [(ns + "a").encode()]
    assert (await store.gc_async(dry_run=True, prefix=ns))["dry_run"] is True
    assert (await store.fsck_async(prefix=ns))["blobs"] == 1
    async with await store.open_reader_async(ns + "a") as reader:
        reader.seek(300_000)
        assert await reader.read(1000) == data[300_000:301_000]
        reader.seek(0)
        assert b"".join([p async for p in reader]) == data
    assert (await store.delete_async(ns + "a")) == m.version
    with pytest.raises(saltblob.NotFound):
        await store.head_async(ns + "a")


async def test_async_iterator_and_writer(store: saltblob.Store, ns: str) -> None:
    data = body(500_000, 3)

    async def pieces() -> AsyncIterator[bytes]:
        for i in range(0, len(data), 50_000):
            await asyncio.sleep(0)
            yield data[i:i + 50_000]

    await store.put_async(ns + "ai", pieces())
    assert store.get(ns + "ai").bytes() == data
    async with store.open_writer_async(ns + "w") as w:
        await w.write(data[:1000])
        await w.write(data[1000:])
    assert w.manifest is not None and store.get(ns + "w").bytes() == data
    with pytest.raises(ValueError, match="stop"):
        async with store.open_writer_async(ns + "w") as w:
            await w.write(b"new")
            raise ValueError("stop")
    assert store.get(ns + "w").bytes() == data

    async def failing() -> AsyncIterator[bytes]:
        yield b"x" * 1000
        raise OSError("source broke")

    with pytest.raises(OSError, match="source broke"):
        await store.put_async(ns + "w", failing())
    assert store.get(ns + "w").bytes() == data


async def test_cancelled_put_commits_nothing(rocksdb_url: str) -> None:
    async with saltblob.open(rocksdb_url) as store:
        await store.put_async("k", b"previous")
        task = asyncio.ensure_future(store.put_async("k", bytes(256 << 20)))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await (await store.get_async("k")).bytes_async()) == b"previous"


async def test_open_async(rocksdb_url: str) -> None:
    store = await saltblob.open_async(rocksdb_url)
    async with store:
        await store.put_async(b"k", b"v")
        assert (await store.get_range_async(b"k")) == b"v"
    assert store.closed
