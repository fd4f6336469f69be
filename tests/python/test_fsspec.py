"""The ``saltblob://`` fsspec filesystem beyond fsspec's abstract suite: how it is found and configured, directories
inferred from ``/``, ranged reads of one version, streamed and exclusive writes, transactions, batch operations,
the async interface, pickling, and bad input (a store that cannot be opened, keys that are not UTF-8, a file used
after its store closed)."""

from __future__ import annotations

import asyncio
import gc
import io
import os
import pickle
import weakref
from pathlib import Path
from typing import Iterator

import fsspec
import pytest

import saltblob
from conftest import CQL, OPTIONS
from saltblob.fsspec import SaltblobFile, SaltblobFileSystem
from test_store import body


@pytest.fixture
def fs(store: saltblob.Store) -> Iterator[SaltblobFileSystem]:
    """The filesystem of the test's store (the one this process has open: it is shared)."""
    url, options = store.__reduce__()[1]
    yield SaltblobFileSystem(store=url, **options)
    SaltblobFileSystem.clear_instance_cache()


def test_registered_for_the_protocol(store: saltblob.Store) -> None:
    assert fsspec.get_filesystem_class("saltblob") is SaltblobFileSystem
    url, options = store.__reduce__()[1]
    fs = fsspec.filesystem("saltblob", store=url, **options)
    assert isinstance(fs, SaltblobFileSystem) and fs.store is store
    SaltblobFileSystem.clear_instance_cache()


def test_the_store_in_the_url_or_the_environment(rocksdb_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with fsspec.open(f"saltblob://a/b.txt?store={rocksdb_url}", "wb") as f:
        f.write(b"from the url")
    fs, path = fsspec.core.url_to_fs(f"saltblob://a/b.txt?store={rocksdb_url}")
    assert path == "a/b.txt" and fs.cat(path) == b"from the url"
    monkeypatch.setenv("SALTBLOB_STORE", rocksdb_url)
    with fsspec.open("saltblob://a/b.txt", "rb") as f:
        assert f.read() == b"from the url"
    # A ? that is no option of ours is part of the key.
    assert SaltblobFileSystem._strip_protocol("saltblob://q?x=1") == "q?x=1"
    SaltblobFileSystem.clear_instance_cache()


def test_directories_are_inferred(fs: SaltblobFileSystem, ns: str) -> None:
    root = ns.rstrip("/")
    for k in ("a/1", "a/2", "a/b/3", "c"):
        fs.pipe(f"{root}/{k}", k.encode())
    assert fs.ls(root, detail=False) == [f"{root}/a", f"{root}/c"]
    assert fs.ls(f"{root}/a", detail=False) == [f"{root}/a/1", f"{root}/a/2", f"{root}/a/b"]
    assert fs.info(f"{root}/a")["type"] == "directory" and fs.info(f"{root}/c")["type"] == "file"
    assert fs.ls(f"{root}/c", detail=False) == [f"{root}/c"]
    assert fs.find(root) == [f"{root}/a/1", f"{root}/a/2", f"{root}/a/b/3", f"{root}/c"]
    assert fs.find(root, withdirs=True) == [root, f"{root}/a", f"{root}/a/1", f"{root}/a/2", f"{root}/a/b",
                                             f"{root}/a/b/3", f"{root}/c"]
    assert fs.find(root, maxdepth=1) == [f"{root}/c"]
    assert fs.glob(f"{root}/a/*") == [f"{root}/a/1", f"{root}/a/2", f"{root}/a/b"]
    assert fs.glob(f"{root}/**/3") == [f"{root}/a/b/3"]
    assert fs.du(root) == 3 + 3 + 5 + 1
    with pytest.raises(FileNotFoundError):
        fs.info(f"{root}/nothing")
    with pytest.raises(FileNotFoundError):
        fs.ls(f"{root}/nothing")
    fs.mkdir(f"{root}/empty")  # nothing to make: no key is under it
    assert not fs.exists(f"{root}/empty")
    fs.rm(f"{root}/a", recursive=True)
    assert fs.ls(root, detail=False) == [f"{root}/c"]


def test_info_carries_the_version(fs: SaltblobFileSystem, ns: str) -> None:
    fs.pipe(ns + "v", b"one")
    info = fs.info(ns + "v")
    m = fs.store.head(ns + "v")
    assert info["version"] == m.version == fs.ukey(ns + "v") and info["size"] == 3
    fs.cp(ns + "v", ns + "w")
    assert fs.checksum(ns + "v") == fs.checksum(ns + "w") and fs.ukey(ns + "v") != fs.ukey(ns + "w")
    assert fs.modified(ns + "v").timestamp() == pytest.approx(m.created_micros / 1e6)


def test_a_failed_call_leaves_no_reference_cycle(fs: SaltblobFileSystem, ns: str) -> None:
    """A blocking call that raises (pyarrow asks ``info`` for a dataset's ``_metadata`` in every read) must not
    keep its caller's frame, and so what the caller holds (pandas: the table read), alive until a garbage
    collection: its exception leaves no reference cycle."""

    class Held:
        pass

    def caller(call: str) -> weakref.ref[Held]:
        held = Held()
        try:
            getattr(fs, call)(ns + "missing")
        except FileNotFoundError:
            pass
        return weakref.ref(held)

    gc.collect()
    gc.disable()
    try:
        for call in ("info", "cat_file", "size"):
            assert caller(call)() is None, call
    finally:
        gc.enable()


def test_ranged_reads_of_one_version(fs: SaltblobFileSystem, ns: str) -> None:
    data = body(3_000_000, 4)
    fs.pipe(ns + "big", data)
    with fs.open(ns + "big", "rb", block_size=1 << 20) as f:
        assert isinstance(f, SaltblobFile) and f.size == len(data)
        f.seek(len(data) - 65536)
        assert f.read() == data[-65536:]
        f.seek(100)
        assert f.read(10) == data[100:110]
        fs.pipe(ns + "big", b"replaced")
        f.seek(2_000_000)  # not read yet: the next fetch finds the new version
        with pytest.raises(saltblob.PreconditionFailed):
            f.read(10)
    assert fs.cat_file(ns + "big") == b"replaced"


def test_reads_fetch_what_they_need_and_more_while_sequential(
    fs: SaltblobFileSystem, ns: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = body(3_000_000, 6)
    fs.pipe(ns + "seq", data)
    fetches: list[tuple[int, int]] = []
    read = SaltblobFile._read

    def counting(self: SaltblobFile, start: int, end: int) -> bytes:
        fetches.append((start, end))
        return read(self, start, end)

    monkeypatch.setattr(SaltblobFile, "_read", counting)
    with fs.open(ns + "seq", "rb") as f:
        got = b"".join(iter(lambda: f.read(10_000), b""))
    assert got == data
    # 64 KiB, then twice as much each time: 64K 128K 256K 512K 1M and the rest.
    assert [e - s for s, e in fetches][:5] == [65536, 131072, 262144, 524288, 1048576] and len(fetches) == 6
    fetches.clear()
    with fs.open(ns + "seq", "rb") as f:
        for at in (2_500_000, 100, 1_000_000, 1_000_050):
            f.seek(at)
            assert f.read(100) == data[at:at + 100]
    # A fetch of the least size for each far read; the last was within the one before.
    assert fetches == [(2_500_000, 2_565_536), (100, 65_636), (1_000_000, 1_065_536)]
    fetches.clear()
    with fs.open(ns + "seq", "rb") as f:
        got = b"".join(iter(lambda: f.read(1 << 20), b""))
    assert got == data
    # Large reads (pyarrow's pre-buffered ones) fetch what they ask, no more: nothing is sliced off and copied.
    assert fetches == [(0, 1 << 20), (1 << 20, 2 << 20), (2 << 20, 3_000_000)]
    fetches.clear()
    with fs.open(ns + "seq", "rb", cache_type="readahead", block_size=1 << 20) as f:
        f.seek(10)
        f.read(10)
    assert fetches == [(10, 10 + 10 + (1 << 20))]


def test_cat_and_cat_ranges(fs: SaltblobFileSystem, ns: str) -> None:
    data = body(200_000, 5)
    fs.pipe({ns + "x": data, ns + "y": b"0123456789"})
    assert fs.cat_file(ns + "x", 10, 20) == data[10:20]
    assert fs.cat_file(ns + "x", -5) == data[-5:]
    assert fs.cat_file(ns + "x", 100, -100) == data[100:-100]
    assert fs.cat_file(ns + "y", 5, 500) == b"56789"
    assert fs.cat_file(ns + "y", 50, 60) == b""
    assert fs.cat([ns + "x", ns + "y"]) == {ns + "x": data, ns + "y": b"0123456789"}
    got = fs.cat_ranges([ns + "x", ns + "y", ns + "x", ns + "y"], [0, 2, 150_000, -3], [4, 4, 150_010, None])
    assert got == [data[:4], b"23", data[150_000:150_010], b"789"]
    missing = fs.cat_ranges([ns + "none"], [0], [1])
    assert isinstance(missing[0], FileNotFoundError)


def test_writes_stream_and_commit_on_close(fs: SaltblobFileSystem, ns: str) -> None:
    with fs.open(ns + "w", "wb") as f:
        for _ in range(10):
            f.write(b"x" * 100_000)
    assert fs.size(ns + "w") == 1_000_000
    with pytest.raises(RuntimeError):
        with fs.open(ns + "w", "wb") as f:
            f.write(b"partial")
            raise RuntimeError("the block failed")
    assert fs.size(ns + "w") == 1_000_000  # nothing committed
    with fs.open(ns + "t.txt", "w", encoding="utf-8") as t:
        t.write("héllo\n")
    assert fs.cat(ns + "t.txt") == "héllo\n".encode()
    with pytest.raises(FileExistsError):
        fs.open(ns + "t.txt", "xb")
    with fs.open(ns + "new", "xb") as f:
        f.write(b"only once")
    with pytest.raises(FileExistsError):
        fs.pipe_file(ns + "new", b"again", mode="create")
    with pytest.raises(ValueError, match="append"):
        fs.open(ns + "new", "ab")


def test_transactions_put_on_commit(fs: SaltblobFileSystem, ns: str) -> None:
    with fs.transaction:
        with fs.open(ns + "t1", "wb") as f:
            f.write(b"staged")
        assert not fs.exists(ns + "t1")
    assert fs.cat(ns + "t1") == b"staged"
    with pytest.raises(RuntimeError):
        with fs.transaction:
            with fs.open(ns + "t2", "wb") as f:
                f.write(b"dropped")
            raise RuntimeError("abandon")
    assert not fs.exists(ns + "t2")


def test_put_and_get_of_local_trees(fs: SaltblobFileSystem, ns: str, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.bin").write_bytes(body(500_000, 1))
    (src / "sub" / "b.txt").write_bytes(b"bee")
    fs.put(str(src), ns + "tree", recursive=True)
    assert fs.find(ns + "tree") == [ns + "tree/a.bin", ns + "tree/sub/b.txt"]
    out = tmp_path / "out"
    fs.get(ns + "tree", str(out), recursive=True)
    assert (out / "a.bin").read_bytes() == body(500_000, 1) and (out / "sub" / "b.txt").read_bytes() == b"bee"
    fs.mv(ns + "tree/sub/b.txt", ns + "tree/c.txt")
    assert fs.find(ns + "tree") == [ns + "tree/a.bin", ns + "tree/c.txt"]


def test_the_async_interface(store: saltblob.Store, ns: str) -> None:
    url, options = store.__reduce__()[1]

    async def run() -> None:
        fs = SaltblobFileSystem(store=url, asynchronous=True, skip_instance_cache=True, **options)
        await fs._pipe_file(ns + "a", b"async")
        assert await fs._cat_file(ns + "a") == b"async"
        assert (await fs._info(ns + "a"))["size"] == 5
        assert await fs._ls(ns.rstrip("/"), detail=False) == [ns + "a"]
        assert await fs._cat_ranges([ns + "a"], [1], [3]) == [b"sy"]
        await fs._rm_file(ns + "a")
        assert not await fs._exists(ns + "a")

    asyncio.run(run())


def test_the_filesystem_pickles(fs: SaltblobFileSystem, ns: str) -> None:
    fs.pipe(ns + "p", b"pickled")
    again = pickle.loads(pickle.dumps(fs))
    assert again is fs and again.cat(ns + "p") == b"pickled"


def test_a_store_that_cannot_be_opened_names_its_url_without_secrets() -> None:
    url = "cql://reader:hunter2@127.0.0.1:1/nothing_here?connect_timeout=1s"
    with pytest.raises(saltblob.Unavailable) as e:
        fsspec.filesystem("saltblob", store=url, skip_instance_cache=True)
    assert "cql://reader:***@127.0.0.1:1/nothing_here" in str(e.value) and "hunter2" not in str(e.value)
    with pytest.raises(ValueError, match="needs a store"):
        SaltblobFileSystem(skip_instance_cache=True)
    with pytest.raises(TypeError, match="colour"):
        SaltblobFileSystem(store="memory://", colour="blue", skip_instance_cache=True)


def test_keys_that_are_not_utf8_are_escaped(fs: SaltblobFileSystem, ns: str) -> None:
    store = fs.store
    store.put(ns.encode() + b"bin/\xff\xfe name%", b"raw")
    [name] = fs.ls(ns + "bin", detail=False)
    assert name == ns + "bin/%FF%FE%20name%25" == saltblob.escape_key(ns.encode() + b"bin/\xff\xfe name%")
    assert fs.cat(name) == b"raw"
    fs.pipe(ns + "bin/%00", b"nul")
    assert store.get(ns.encode() + b"bin/\x00").bytes() == b"nul"
    with pytest.raises(saltblob.InvalidArgument, match="%25"):
        fs.cat(ns + "100%")


def test_a_file_used_after_its_store_closed(rocksdb_url: str) -> None:
    store = saltblob.open(rocksdb_url, **OPTIONS)
    fs = SaltblobFileSystem(store=rocksdb_url, skip_instance_cache=True, **OPTIONS)
    assert fs.store is store
    fs.pipe("k", b"x" * 100)
    f = fs.open("k", "rb", block_size=16, cache_type="none")
    f.read(10)
    store.close()
    with pytest.raises(saltblob.InvalidArgument, match="closed"):
        f.read(10)
    # The filesystem opens the store again for what comes next.
    assert fs.cat("k") == b"x" * 100
    fs.store.close()


@pytest.mark.skipif(not CQL, reason="TEST_CQL is not set")
def test_one_filesystem_per_store_url(cql_url: str) -> None:
    a = fsspec.filesystem("saltblob", store=cql_url)
    b = fsspec.filesystem("saltblob", store=cql_url)
    assert a is b
    c = fsspec.filesystem("saltblob", store=cql_url, customer_key=os.urandom(32))
    assert c is not a and c.store is a.store
    c.pipe("sealed", b"s")
    assert a.store.head("sealed").encryption_provider == "customer"
    a.store.close()
    SaltblobFileSystem.clear_instance_cache()


def test_writer_of_open_is_a_blob_writer(fs: SaltblobFileSystem, ns: str) -> None:
    f = fs.open(ns + "bw", "wb")
    assert isinstance(f, saltblob.BlobWriter) and isinstance(f, io.BufferedIOBase)
    f.write(b"z")
    f.close()
    assert f.manifest is not None and f.manifest.size == 1
