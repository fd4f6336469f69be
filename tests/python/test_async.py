"""The asyncio API: every call's `_async` twin, many puts and gets at once on one event loop, async iterators in
and out, the async writer, cancellation."""

from __future__ import annotations

import asyncio
import shutil
from typing import AsyncIterator

import pytest

import saltblob
from test_store import body

@pytest.mark.asyncio
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


@pytest.mark.asyncio
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


@pytest.mark.asyncio
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


@pytest.mark.asyncio
async def test_cancelled_put_commits_nothing(rocksdb_url: str) -> None:
    async with saltblob.open(rocksdb_url) as store:
        await store.put_async("k", b"previous")
        task = asyncio.ensure_future(store.put_async("k", bytes(256 << 20)))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await (await store.get_async("k")).bytes_async()) == b"previous"


@pytest.mark.asyncio
async def test_open_async(rocksdb_url: str) -> None:
    store = await saltblob.open_async(rocksdb_url)
    async with store:
        await store.put_async(b"k", b"v")
        assert (await store.get_range_async(b"k")) == b"v"
    assert store.closed


@pytest.mark.asyncio
async def test_results_reach_the_loop_through_its_queue(store: saltblob.Store, ns: str) -> None:
    """On a loop that can watch a file descriptor, `_async` results are resolved by the loop's own completion
    queue (no I/O thread takes the GIL); many at once, errors included, each reaching its own awaiter."""
    from saltblob import _io

    loop = asyncio.get_running_loop()
    await store.put_async(ns + "q", b"queued")
    assert type(_io._loop_completions.get(loop)).__name__ == "Completions"
    keys = [f"{ns}q{i}" for i in range(200)]
    await asyncio.gather(*(store.put_async(k, k.encode() * 3) for k in keys))
    missing = [f"{ns}missing{i}" for i in range(50)]
    got = await asyncio.gather(*(store.get_range_async(k) for k in keys + missing), return_exceptions=True)
    assert got[:200] == [k.encode() * 3 for k in keys]
    assert all(isinstance(e, saltblob.NotFound) for e in got[200:])


def test_a_loop_that_cannot_watch_descriptors_still_gets_results(rocksdb_url: str) -> None:
    """A loop without `add_reader` (like Windows' proactor loop) gets its results through
    `call_soon_threadsafe`: the same values and errors, and cancellation still drops the call."""
    from saltblob import _io

    class NoReaderLoop(asyncio.SelectorEventLoop):
        def add_reader(self, *args: object) -> None:
            raise NotImplementedError

    async def run(store: saltblob.Store) -> None:
        loop = asyncio.get_running_loop()
        await store.put_async("k", b"v" * 1000)
        assert _io._loop_completions[loop] is None
        assert await (await store.get_async("k")).bytes_async() == b"v" * 1000
        with pytest.raises(saltblob.NotFound):
            await store.get_async("absent")
        task = asyncio.ensure_future(store.put_async("k", bytes(256 << 20)))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await store.get_range_async("k") == b"v" * 1000

    loop = NoReaderLoop()
    try:
        with saltblob.open(rocksdb_url) as store:
            loop.run_until_complete(run(store))
    finally:
        loop.close()


@pytest.mark.parametrize("size", [0, 1000, 1 << 20, (1 << 20) + 1, 3 << 20, 4 << 20, (9 << 20) + 4097])
@pytest.mark.asyncio
async def test_every_way_to_take_the_bytes_of_a_get(store: saltblob.Store, ns: str, size: int) -> None:
    """Values up to 1 MiB are read by `get` itself, larger ones when taken: either way `bytes`, `chunks` and
    `stream`, sync and async, give the value, and only once. (`bytes` objects are filled in place,
    not zeroed first, and from 4 MiB on their pages are faulted in ahead, beside the copies: the largest size, not a
    multiple of a page, checks every byte of such an object.)"""
    data = body(size, 7)
    await store.put_async(ns + "v", data, chunk_size=256 << 10)
    r = await store.get_async(ns + "v")
    assert r.manifest.size == size and r.range == (0, size)
    assert await r.bytes_async() == data
    with pytest.raises(saltblob.InvalidArgument, match="already taken"):
        await r.bytes_async()
    assert b"".join(await (await store.get_async(ns + "v")).chunks_async()) == data
    assert b"".join([p async for p in (await store.get_async(ns + "v")).stream(100_000)]) == data
    assert store.get(ns + "v").bytes() == data
    assert b"".join(store.get(ns + "v").chunks()) == data
    assert b"".join(store.get(ns + "v").stream()) == data


@pytest.mark.asyncio
async def test_large_values_read_async_again_and_again(rocksdb_url: str) -> None:
    """`bytes_async` of a large value fills its `bytes` object on saltblob's I/O threads, and so does
    `get_range_async` of a large range (it takes its bytes with `bytes_async`), whatever memory the store keeps
    for its own reads (`idle_value_buffers=`, 0 here for none, and the default): every read gives its own value,
    while the others are held, and a range read is a coroutine that asyncio can gather and cancel."""
    for url in (rocksdb_url, rocksdb_url + "?idle_value_buffers=0"):
        async with await saltblob.open_async(url) as store:
            values = [body(5 << 20, seed) for seed in (1, 2)]
            for i, v in enumerate(values):
                await store.put_async(f"v{i}", v)
            held = []
            for _ in range(2):
                for i, v in enumerate(values):
                    held.append(await (await store.get_async(f"v{i}")).bytes_async())
                    assert held[-1] == v
                    held.append(await store.get_range_async(f"v{i}", 1, len(v) - 1))
                    assert held[-1] == v[1:-1]
            assert [len(h) for h in held] == [5 << 20, (5 << 20) - 2] * 4
            ranges = await asyncio.gather(*(store.get_range_async(f"v{i}", suffix=(3 << 20) + 5) for i in (0, 1)))
            assert ranges == [v[-((3 << 20) + 5) :] for v in values]
            slow = asyncio.ensure_future(store.get_range_async("v0", 0, 5 << 20))
            slow.cancel()
            with pytest.raises(asyncio.CancelledError):
                await slow
            assert await store.get_range_async("v1", 7, 4 << 20) == values[1][7 : 4 << 20]
        # The next URL opens the same directory afresh.
        shutil.rmtree(rocksdb_url.removeprefix("rocksdb://"))


@pytest.mark.parametrize("take", ["bytes", "bytes_async"])
def test_a_large_read_that_fails_midway_raises_and_hands_out_nothing(rocksdb_url: str, take: str) -> None:
    """A version replaced and reclaimed (grace 0) after `get` read its manifest: taking its bytes raises the
    retryable `Unavailable` of a reclaimed version, with either way of taking them, and the store reads on."""
    with saltblob.open(rocksdb_url, grace=0) as store:
        old, new = body(9 << 20, 1), body(9 << 20, 2)
        store.put("k", old)
        result = store.get("k")
        store.put("k", new)
        assert store.gc(grace=0)["reclaimed_versions"] == 1
        with pytest.raises(saltblob.Unavailable, match="reclaimed") as raised:
            if take == "bytes":
                result.bytes()
            else:

                async def take_async() -> bytes:
                    return await result.bytes_async()

                asyncio.run(take_async())
        assert raised.value.retryable
        assert store.get("k").bytes() == new
