"""``saltblob://``: a saltblob store as an fsspec filesystem, so that pandas, pyarrow, dask and every other fsspec
consumer read and write it directly, in this process, through the native module (no server, no HTTP)::

    import pandas as pd

    opts = {"store": "rocksdb:///var/lib/saltblob"}           # or cql://host:9042/keyspace
    pd.DataFrame({"a": [1, 2]}).to_parquet("saltblob://tables/t.parquet", storage_options=opts)
    df = pd.read_parquet("saltblob://tables/t.parquet", storage_options=opts)

The package registers the protocol with fsspec (entry point ``fsspec.specs``): ``fsspec.filesystem("saltblob",
store=URL)`` and every ``saltblob://`` URL find this class without an import.

**Where the store comes from.** The storage option ``store`` (a store URL, as ``saltblob.open`` takes it), else a
``store=`` query on the ``saltblob://`` URL (``saltblob://tables/t.parquet?store=rocksdb:///var/lib/saltblob``,
%-encoding the store URL's own ``?`` and ``&``), else the environment's ``SALTBLOB_STORE``, as the CLI. The options of
``saltblob.open`` (``StoreOptions``: ``inflight_bytes=``, ``codec=``, ...) travel the same ways; ``customer_key``
(32 bytes; storage options only) seals what the filesystem writes and opens what it reads. The filesystem shares the
store this process has open for the same URL and options (``saltblob._handles``), so a program may hold a
``saltblob.open`` store and read the same data through pandas.

**Paths.** A path is a key, escaped as the CLI escapes keys (``saltblob.escape_key``): ``%`` is written ``%25``,
white space, control characters and bytes that are not UTF-8 are ``%XX``, everything else stands for itself.
Directories are inferred from ``/``: ``a/b`` is a directory when some key starts with ``a/b/``; they cannot be
empty, so ``mkdir`` does nothing and a directory goes when its last key does. A key that ends with ``/`` is not
reachable as a file.

**Reading** is ranged and buffered: a file fetches what it reads, at least ``block_size`` (64 KiB by default),
and more ahead while reads go on sequentially (``SaltblobFile``), always from the version it opened
(``PreconditionFailed`` if the key is overwritten meanwhile); ``cat_ranges`` reads several ranges of a file in one
call (nearby ones as one read). A parquet reader's footer read (the last 64 KiB) costs one request, and a reader
that skips row groups does not fetch them. **Writing** streams through the native writer in
bounded memory and commits on ``close`` (nothing when the ``with`` block raises); mode ``"xb"`` commits only if the
key holds nothing (``FileExistsError``). Within ``fs.transaction``, files are staged and put on commit. Append
(``"ab"``) is not supported: a version is immutable.

The class is an ``AsyncFileSystem``: its ``_async`` methods run on the store's own I/O threads, and the batch
methods (``cat``, ``cat_ranges``, ``put``, ``get``, ``rm``, ``copy``) keep several operations in flight.
"""

from __future__ import annotations

import datetime
import functools
import io
import os
import tempfile
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Tuple

from fsspec.asyn import AsyncFileSystem, _run_coros_in_chunks, mirror_sync_methods  # type: ignore[import-untyped]
from fsspec.spec import AbstractBufferedFile  # type: ignore[import-untyped]

from . import _handles
from ._saltblob import Manifest, Store, escape_key, redact_url, unescape_key
from ._types import StoreOptions
from .exceptions import NotFound, RangeNotSatisfiable

__all__ = ["SaltblobFile", "SaltblobFileSystem"]

_STORE_OPTIONS = frozenset(StoreOptions.__annotations__)
"""The keyword options of ``saltblob.open`` the filesystem passes on."""

_URL_OPTIONS = _STORE_OPTIONS | {"store"}
"""The options a ``saltblob://`` URL's query may carry."""


def _query(url: str) -> Tuple[str, Dict[str, str]]:
    """``url`` without its query, and the query's options, when every name in it is an option of the filesystem;
    else ``url`` as it is (a ``?`` that is part of a key)."""
    head, sep, query = url.partition("?")
    if not sep:
        return url, {}
    pairs = urllib.parse.parse_qsl(query, keep_blank_values=True)
    if not pairs or any(name not in _URL_OPTIONS for name, _ in pairs):
        return url, {}
    return head, dict(pairs)


def _key(path: str) -> bytes:
    """The key of fsspec path ``path`` (already stripped of the protocol)."""
    return unescape_key(path)


def _micros(m: Optional[int]) -> Optional[datetime.datetime]:
    return None if m is None else datetime.datetime.fromtimestamp(m / 1e6, tz=datetime.timezone.utc)


def _file_info(name: str, m: Manifest) -> Dict[str, Any]:
    """The ``info`` of a file: fsspec's ``name``, ``size``, ``type``, and the version's manifest."""
    return {
        "name": name,
        "size": m.size,
        "type": "file",
        "version": m.version,
        "digest": m.digest,
        "created": m.created_micros / 1e6,
        "expires": None if m.expires_micros is None else m.expires_micros / 1e6,
        "content_type": m.content_type,
        "metadata": dict(m.metadata),
        "layout": m.layout,
    }


def _dir_info(name: str) -> Dict[str, Any]:
    return {"name": name, "size": 0, "type": "directory"}


def _clamp(size: int, start: Optional[int], end: Optional[int]) -> Tuple[int, int]:
    """fsspec's ``start``/``end`` (either may be ``None`` or negative, counted from the end) as a range within a
    blob of ``size`` bytes."""
    s = 0 if start is None else (size + start if start < 0 else start)
    e = size if end is None else (size + end if end < 0 else end)
    e = max(0, min(e, size))
    return max(0, min(s, e)), e


class SaltblobFileSystem(AsyncFileSystem):  # type: ignore[misc]
    """A saltblob store as an fsspec filesystem (see the module's documentation).

    Parameters: ``store``, the store URL (default: the URL's ``store=`` query, else ``SALTBLOB_STORE``);
    ``customer_key``, 32 bytes that seal what is written and open what is read; ``block_size`` and ``cache_type``,
    the defaults of files opened for reading (64 KiB, ``"adaptive"``: see ``SaltblobFile``); any option of
    ``saltblob.open``.
    """

    protocol = ("saltblob",)
    root_marker = ""
    async_impl = True
    default_block_size = 64 << 10
    default_cache_type = "adaptive"

    def __init__(
        self,
        store: Optional[str] = None,
        *,
        customer_key: Optional[bytes] = None,
        block_size: Optional[int] = None,
        cache_type: Optional[str] = None,
        asynchronous: bool = False,
        loop: Any = None,
        batch_size: Optional[int] = None,
        **options: Any,
    ) -> None:
        super().__init__(asynchronous=asynchronous, loop=loop, batch_size=batch_size)
        url = store or os.environ.get("SALTBLOB_STORE")
        if not url:
            raise ValueError(
                "saltblob:// needs a store: give the storage option store=URL (rocksdb:///DIR or "
                "cql://HOST:9042/KEYSPACE), a store= query on the URL, or set SALTBLOB_STORE"
            )
        self.url = url
        self.options: Dict[str, Any] = options
        self.customer_key = customer_key
        self.block_size = block_size or self.default_block_size
        self.cache_type = cache_type or self.default_cache_type
        self._store: Optional[Store] = None
        self.store  # opened now: a store that cannot open fails here, with its URL
        # The blocking twins of the _async methods, made now (fsspec would make them after __init__, and then skips
        # the ones made), each raising without the reference cycle fsspec's own leave (_raising_without_cycles).
        mirror_sync_methods(self)
        for name, method in list(vars(self).items()):
            if callable(method) and getattr(method, "__wrapped__", None) == getattr(self, "_" + name, None):
                setattr(self, name, _raising_without_cycles(method))

    @property
    def store(self) -> Store:
        """The store: the one this process has open for the URL and options, else one opened now."""
        s = self._store
        if s is None or s.closed:
            try:
                s = _handles.shared(self.url, self.options)
            except Exception as e:
                raise _naming_url(e, self.url) from e
            self._store = s
        return s

    # Paths

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("saltblob://"):
            path, _ = _query(path[len("saltblob://"):])
        elif path.startswith("saltblob::"):
            path = path[len("saltblob::"):]
        return path.rstrip("/")

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> Dict[str, Any]:
        if not path.startswith("saltblob://"):
            return {}
        return dict(_query(path[len("saltblob://"):])[1])

    def unstrip_protocol(self, name: str) -> str:
        return "saltblob://" + name

    def _with_key(self, **kwargs: Any) -> Dict[str, Any]:
        if self.customer_key is not None:
            kwargs["customer_key"] = self.customer_key
        return kwargs

    # Information

    async def _info(self, path: str, **kwargs: Any) -> Dict[str, Any]:
        path = self._strip_protocol(path)
        if path == "":
            return _dir_info("")
        key = _key(path)
        try:
            return _file_info(path, await self.store.head_async(key))
        except NotFound:
            pass
        page = await self.store.list_page_async(key + b"/", limit=1)
        if page.entries or page.common_prefixes:
            return _dir_info(path)
        raise FileNotFoundError(f"no such file or directory: saltblob://{path} (in {redact_url(self.url)})")

    async def _exists(self, path: str, **kwargs: Any) -> bool:
        try:
            await self._info(path)
            return True
        except FileNotFoundError:
            return False

    async def _ls(self, path: str, detail: bool = True, **kwargs: Any) -> List[Any]:
        path = self._strip_protocol(path)
        prefix = b"" if path == "" else _key(path) + b"/"
        page = await self.store.list_with_delimiter_async(prefix)
        out: List[Dict[str, Any]] = [_dir_info(escape_key(p)[:-1]) for p in page.common_prefixes]
        for entry in page.entries:
            if entry.key == prefix or entry.manifest is None:
                continue  # a "directory marker" key, or a damaged manifest (fsck reports it)
            out.append(_file_info(escape_key(entry.key), entry.manifest))
        if not out and path != "":
            info = await self._info(path)  # a file lists as itself; nothing raises FileNotFoundError
            out = [info]
        out.sort(key=lambda i: i["name"])
        return out if detail else [i["name"] for i in out]

    async def _find(
        self, path: str, maxdepth: Optional[int] = None, withdirs: bool = False, **kwargs: Any
    ) -> Any:
        if maxdepth is not None:
            return await super()._find(path, maxdepth=maxdepth, withdirs=withdirs, **kwargs)
        detail = kwargs.pop("detail", False)
        path = self._strip_protocol(path)
        prefix = b"" if path == "" else _key(path) + b"/"
        out: Dict[str, Dict[str, Any]] = {}
        token = None
        while True:
            page = await self.store.list_page_async(prefix, page_token=token)
            for entry in page.entries:
                if entry.key == prefix or entry.manifest is None:
                    continue
                name = escape_key(entry.key)
                out[name] = _file_info(name, entry.manifest)
                if withdirs:
                    parent = name.rsplit("/", 1)[0]
                    while len(parent) > len(path) and parent not in out:
                        out[parent] = _dir_info(parent)
                        parent = parent.rsplit("/", 1)[0]
            token = page.next_token
            if token is None:
                break
        if withdirs and out and path != "":
            out[path] = _dir_info(path)
        if not out and path != "":
            try:
                info = await self._info(path)
                if info["type"] == "file":
                    out[path] = info
            except FileNotFoundError:
                pass
        names = sorted(out)
        return {n: out[n] for n in names} if detail else names

    async def _mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        pass  # directories exist while keys are under them

    async def _makedirs(self, path: str, exist_ok: bool = False) -> None:
        pass

    def rmdir(self, path: str) -> None:
        pass

    def ukey(self, path: str) -> str:
        """The version id of the file: it changes with every put."""
        return str(self.info(path)["version"])

    def checksum(self, path: str) -> int:
        """The file's BLAKE3 digest as an int: equal for equal bytes (copies included)."""
        return int(self.info(path)["digest"], 16)

    def modified(self, path: str) -> datetime.datetime:
        """When the current version was put (UTC)."""
        return _micros(int(self.info(path)["created"] * 1e6))  # type: ignore[return-value]

    def created(self, path: str) -> datetime.datetime:
        return self.modified(path)

    # Reading

    async def _cat_file(
        self, path: str, start: Optional[int] = None, end: Optional[int] = None, **kwargs: Any
    ) -> bytes:
        key = _key(self._strip_protocol(path))
        store = self.store
        if start is None and end is None:
            return await (await store.get_async(key, **self._with_key())).bytes_async()
        if end is None and start is not None and start < 0:
            size = (await store.head_async(key)).size
            return await store.get_range_async(key, max(0, size + start), **self._with_key())
        if (start is None or start >= 0) and end is not None and end >= 0 and (start or 0) < end:
            try:
                return (await store.get_ranges_async(key, [start or 0], [end], **self._with_key()))[0]
            except RangeNotSatisfiable:
                pass
        s, e = _clamp((await store.head_async(key)).size, start, end)
        if s == e:
            return b""
        return (await store.get_ranges_async(key, [s], [e], **self._with_key()))[0]

    async def _cat_ranges(
        self,
        paths: List[str],
        starts: Any,
        ends: Any,
        max_gap: Optional[int] = None,
        batch_size: Optional[int] = None,
        on_error: str = "return",
        **kwargs: Any,
    ) -> List[Any]:
        if not isinstance(paths, list):
            raise TypeError("paths must be a list")
        if not isinstance(starts, list):
            starts = [starts] * len(paths)
        if not isinstance(ends, list):
            ends = [ends] * len(paths)
        if len(starts) != len(paths) or len(ends) != len(paths):
            raise ValueError("paths, starts and ends must be as long")
        by_path: Dict[str, List[int]] = {}
        for i, p in enumerate(paths):
            by_path.setdefault(self._strip_protocol(p), []).append(i)
        out: List[Any] = [None] * len(paths)

        async def one(path: str, indices: List[int]) -> None:
            read: List[Any]
            try:
                read = await self._ranges(path, [starts[i] for i in indices], [ends[i] for i in indices])
            except Exception as e:
                if on_error != "return":
                    raise
                read = [e] * len(indices)
            for i, b in zip(indices, read):
                out[i] = b

        await _run_coros_in_chunks(
            [one(p, ix) for p, ix in by_path.items()], batch_size=batch_size or self.batch_size, nofiles=True
        )
        return out

    async def _ranges(self, path: str, starts: List[Optional[int]], ends: List[Optional[int]]) -> List[bytes]:
        """The bytes of ranges of one file, fsspec's ``start``/``end`` rules (``None``, negative, past the end)."""
        key = _key(path)
        store = self.store
        plain = [(s, e) for s, e in zip(starts, ends) if s is not None and e is not None and 0 <= s < e]
        if len(plain) == len(starts):
            try:
                return list(
                    await store.get_ranges_async(key, [s for s, _ in plain], [e for _, e in plain], **self._with_key())
                )
            except RangeNotSatisfiable:
                pass
        size = (await store.head_async(key)).size
        clamped = [_clamp(size, s, e) for s, e in zip(starts, ends)]
        return list(
            await store.get_ranges_async(key, [s for s, _ in clamped], [e for _, e in clamped], **self._with_key())
        )

    async def _get_file(self, rpath: str, lpath: str, callback: Any = None, outfile: Any = None, **kwargs: Any) -> None:
        rpath = self._strip_protocol(rpath)
        if os.path.isdir(lpath):
            return
        try:
            result = await self.store.get_async(_key(rpath), **self._with_key())
        except NotFound:
            if await self._isdir(rpath):
                os.makedirs(lpath, exist_ok=True)
                return
            raise
        if callback is not None:
            callback.set_size(result.manifest.size)
        f = outfile or open(lpath, "wb")
        try:
            async for piece in result.stream(4 << 20):
                f.write(piece)
                if callback is not None:
                    callback.relative_update(len(piece))
        finally:
            if outfile is None:
                f.close()

    # Writing

    async def _pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        key = _key(self._strip_protocol(path))
        await self.store.put_async(key, value, **self._with_key(if_absent=mode == "create", **kwargs))

    async def _put_file(
        self, lpath: str, rpath: str, callback: Any = None, mode: str = "overwrite", **kwargs: Any
    ) -> None:
        if os.path.isdir(lpath):
            return
        key = _key(self._strip_protocol(rpath))
        size = os.path.getsize(lpath)
        if callback is not None:
            callback.set_size(size)
        with open(lpath, "rb") as f:
            await self.store.put_async(key, f, **self._with_key(if_absent=mode == "create", size_hint=size))
        if callback is not None:
            callback.relative_update(size)

    async def _cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        src, dst = _key(self._strip_protocol(path1)), _key(self._strip_protocol(path2))
        await self.store.copy_async(src, dst, **self._with_key())

    async def _rm_file(self, path: str, **kwargs: Any) -> None:
        await self.store.delete_async(_key(self._strip_protocol(path)))

    async def _rm(
        self, path: Any, recursive: bool = False, batch_size: Optional[int] = None, maxdepth: Optional[int] = None,
        **kwargs: Any,
    ) -> None:
        paths = await self._expand_path(path, recursive=recursive, maxdepth=maxdepth)
        await self.store.delete_many_async([_key(p) for p in paths if p != ""])
        self.invalidate_cache()

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: Optional[int] = None,
        autocommit: bool = True,
        cache_options: Optional[Dict[str, Any]] = None,
        **kwargs: Any,
    ) -> Any:
        path = self._strip_protocol(path)
        if mode == "rb":
            return SaltblobFile(
                self, path, block_size=block_size or self.block_size,
                cache_type=kwargs.pop("cache_type", None) or self.cache_type, cache_options=cache_options,
            )
        if mode not in ("wb", "xb"):
            raise ValueError(f"mode {mode!r} is not supported by saltblob:// (a version is immutable: no append)")
        key = _key(path)
        if mode == "xb" and self.store.exists(key):
            raise FileExistsError(f"saltblob://{path} exists")
        options = self._with_key(if_absent=mode == "xb")
        if not autocommit:
            return _StagedFile(self, path, key, options)
        return self.store.open_writer(key, **options)


def _raising_without_cycles(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, a blocking twin fsspec made of an ``_async`` method, whose exceptions leave no reference cycle.

    fsspec's ``sync`` hands the coroutine's exception from its loop's thread in a list that the frames of ``sync``
    and of its runner hold, and that the exception's traceback holds in turn: a cycle, alive until the cyclic
    garbage collector runs, and with it every frame of the caller's stack at the time of the call. pyarrow's
    ``FSSpecHandler`` asks ``info`` for ``_common_metadata`` and ``_metadata`` in every ``pd.read_parquet`` of a
    directory, which raises ``FileNotFoundError``; the cycle then kept pandas' frame and the table it read (the
    whole dataset) alive after the read, and the next read paid for fresh memory: twice the CPU of a read of the
    same files from the local file system. The locals of fsspec's finished frames in the traceback are cleared
    (their names and lines stay)."""

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except BaseException as e:
            tb = e.__traceback__
            while tb is not None:
                if tb.tb_frame.f_globals.get("__name__") == "fsspec.asyn":
                    try:
                        tb.tb_frame.clear()
                    except RuntimeError:
                        pass  # still running (a generator's frame): left as it is
                tb = tb.tb_next
            raise

    return wrapper


def _naming_url(e: Exception, url: str) -> Exception:
    """``e`` (failing to open the store of ``url``) as the same class of exception whose message names the URL,
    its password hidden."""
    message = f"cannot open the saltblob store {redact_url(url)}: {e}"
    try:
        out = type(e)(message)
    except Exception:
        return e
    if hasattr(e, "retryable"):
        out.retryable = e.retryable  # type: ignore[attr-defined]
    return out


class SaltblobFile(AbstractBufferedFile):  # type: ignore[misc]
    """A file of ``saltblob://`` open for reading, always from the version it opened (``PreconditionFailed`` once
    the key holds another).

    By default (``cache_type="adaptive"``) it reads as a parquet or CSV reader wants: a read fetches what it asks
    for, and at least ``block_size`` bytes (64 KiB by default, what a parquet reader reads of a footer first); reads that
    go on where the last fetch ended fetch twice as much each time, up to 64 MiB, and smaller reads are served from
    the last fetch. A read that goes on where the last fetch ended and asks for at least half as much as it fetched
    fetches only what it asks (no slice of a larger fetch to copy). Any of fsspec's cache types may be named instead
    (``cache_type="readahead"``, ...).
    """

    MAX_SPAN = 64 << 20
    """The most one sequential fetch reads ahead."""

    def __init__(
        self,
        fs: SaltblobFileSystem,
        path: str,
        block_size: Optional[int] = None,
        cache_type: str = "adaptive",
        **kwargs: Any,
    ) -> None:
        self._store = fs.store
        self._key = _key(path)
        m = self._store.head(self._key)
        self.details = _file_info(path, m)
        self._adaptive = cache_type == "adaptive"
        # The last fetch, served from while reads stay within it, and how much it read.
        self._held_start, self._held, self._span = 0, b"", 0
        super().__init__(
            fs, path, mode="rb", block_size=block_size, cache_type="none" if self._adaptive else cache_type,
            size=m.size, **kwargs,
        )

    def _read(self, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` of the version opened, fetched."""
        kwargs = self.fs._with_key(if_version=self.details["version"])
        return self._store.get_ranges(self._key, [start], [end], **kwargs)[0]

    def _fetch_range(self, start: int, end: int) -> bytes:
        end = min(end, self.size)
        if start >= end:
            return b""
        if not self._adaptive:
            return self._read(start, end)
        held_start, held = self._held_start, self._held
        held_end = held_start + len(held)
        if held_start <= start and end <= held_end:
            return held if (start, end) == (held_start, held_end) else held[start - held_start:end - held_start]
        head = b""
        if held_start <= start < held_end:  # the tail of the last fetch, then on from its end
            head, start = held[start - held_start:], held_end
        sequential = start == held_end and self._span > 0
        span = min(self.MAX_SPAN, self._span * 2) if sequential else self.blocksize
        if sequential and 2 * (end - start) >= self._span:
            # A reader already reading in large pieces (pyarrow's pre-buffered column chunks) gets what it asks:
            # a fetch ahead would be sliced off (copied) now and sliced again (copied) by the next read.
            span = 0
        fetch_end = min(self.size, start + max(end - start, span))
        data = self._read(start, fetch_end)
        self._held_start, self._held, self._span = start, data, fetch_end - start
        body = data if fetch_end == end else data[: end - start]
        return head + body if head else body


class _StagedFile(io.BufferedIOBase):
    """A file written within ``fs.transaction``: its bytes wait in a temporary file (in memory up to 8 MiB) until
    the transaction commits (``commit``, a put) or not (``discard``)."""

    def __init__(self, fs: SaltblobFileSystem, path: str, key: bytes, options: Dict[str, Any]) -> None:
        super().__init__()
        self.fs, self.path, self._key, self._options = fs, path, key, options
        self._spool: Any = tempfile.SpooledTemporaryFile(max_size=8 << 20)
        self.autocommit = False

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self._checkClosed()
        return int(self._spool.write(data))

    def tell(self) -> int:
        return int(self._spool.tell())

    def commit(self) -> None:
        """Puts the staged bytes."""
        self._spool.seek(0)
        try:
            self.fs.store.put(self._key, self._spool, **self._options)
        finally:
            self._spool.close()

    def discard(self) -> None:
        """Drops the staged bytes."""
        self._spool.close()


