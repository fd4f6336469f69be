"""File-like readers of one blob version: ``BlobReader`` (an ``io.RawIOBase``, so ``io.BufferedReader``,
``readline``, iteration and every consumer of binary files work with it) and ``AsyncBlobReader``. Both sit on a
``ReadCursor`` of the native module, which fetches the ranges asked for, reading further ahead while reads go on
sequentially, and raises ``PreconditionFailed`` if the key is overwritten meanwhile. And the writer of a new
version, ``BlobWriter`` (an ``io.BufferedIOBase``, so ``io.TextIOWrapper``, ``csv`` and every producer of binary
files write to it), on the native module's ``RawBlobWriter``.
"""

from __future__ import annotations

import io
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any, AsyncIterable, Awaitable, Optional, Type

if TYPE_CHECKING:
    import asyncio

    from _typeshed import ReadableBuffer, WriteableBuffer

    from ._saltblob import AsyncBlobWriter, GetResult, Manifest, RawBlobWriter, ReadCursor


def _resolve(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """Ends ``future`` (an ``_async`` call's) with ``value``, its result if ``ok`` else its exception, unless it
    was cancelled meanwhile. Called on the event loop by the native module: by its ``Completions`` or through
    ``call_soon_threadsafe``."""
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


async def _bytes_when_read(read: Awaitable[GetResult]) -> bytes:
    """What ``Store.get_range_async`` returns: the bytes of the ``GetResult`` that ``read`` ends with, taken with
    ``bytes_async`` (a large range is copied into its ``bytes`` object on saltblob's I/O threads; a small one came
    with the result)."""
    return await (await read).bytes_async()


async def _list_when_read(read: Awaitable[GetResult]) -> list[bytes]:
    """What ``Store.get_ranges_async`` returns for one range: ``_bytes_when_read``'s bytes in a list of one."""
    return [await (await read).bytes_async()]


# Each event loop's completion queue (native ``Completions``), or None for a loop that cannot watch a file
# descriptor. Weak keys: a loop's queue goes with the loop.
_loop_completions: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()


def _completions(loop: asyncio.AbstractEventLoop) -> Any:
    """The queue through which ``_async`` calls made on ``loop`` are resolved, made on first use and watched with
    ``loop.add_reader``; None when the loop cannot watch a file descriptor (``NotImplementedError``, as on Windows'
    proactor loop) or cannot be referred to weakly: results then come through ``call_soon_threadsafe``."""
    try:
        return _loop_completions[loop]
    except KeyError:
        pass
    except TypeError:
        return None
    from ._saltblob import Completions

    queue: Any = Completions(_resolve)
    try:
        loop.add_reader(queue.fileno(), queue.drain)
    except NotImplementedError:
        queue = None
    _loop_completions[loop] = queue
    return queue


async def _put_aiter(writer: AsyncBlobWriter, pieces: AsyncIterable[Any]) -> Manifest:
    """``put_async`` of an async iterator: its pieces fed to ``writer`` on the event loop; commits once the
    iterator ends, and nothing if it (or the task) raises."""
    try:
        async for piece in pieces:
            await writer.write(piece)
    except BaseException:
        await writer.abort()
        raise
    return await writer.close()


class _OnCursor:
    """What both readers read from their ``ReadCursor``: the version's manifest and size."""

    _cursor: ReadCursor

    @property
    def manifest(self) -> Manifest:
        """The manifest of the version read."""
        return self._cursor.manifest

    @property
    def size(self) -> int:
        """The size of the version read, in bytes."""
        return self._cursor.size


class BlobReader(_OnCursor, io.RawIOBase):
    """A read-only, seekable binary file over one version of a blob (``Store.open_reader``)."""

    def __init__(self, cursor: ReadCursor) -> None:
        super().__init__()
        self._cursor = cursor

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def read(self, size: Optional[int] = -1) -> bytes:
        """Reads up to ``size`` bytes (all that is left by default); ``b""`` at the end."""
        self._checkClosed()
        return self._cursor.read(size)

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: WriteableBuffer) -> int:
        self._checkClosed()
        view = memoryview(buffer).cast("B")
        data = self._cursor.read(len(view))
        view[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._checkClosed()
        return self._cursor.seek(offset, whence)

    def tell(self) -> int:
        self._checkClosed()
        return self._cursor.tell()


class BlobWriter(io.BufferedIOBase):
    """A write-only binary file that makes a new version of one blob (``Store.open_writer``): ``write`` streams
    the bytes to the store (waiting, without the GIL, while the put is a window ahead), ``close`` commits them and
    returns nothing (``manifest`` then holds the version). As a context manager it commits on a clean exit and
    commits nothing when the block raises; ``abort()`` ends it without committing, and so does dropping it unclosed.

    A wrapper's ``close`` closes the writer, so ``io.TextIOWrapper(writer)`` commits when it is closed, exception
    or not: with a wrapper, call ``abort()`` on the writer before the wrapper closes to commit nothing.
    """

    def __init__(self, raw: RawBlobWriter, name: str) -> None:
        super().__init__()
        self._raw = raw
        self._written = 0
        self.name = name
        """The key, escaped as ``saltblob.escape_key`` writes it."""
        self.mode = "wb"

    @property
    def manifest(self) -> Optional[Manifest]:
        """The manifest of the committed version, once ``close`` returned."""
        return self._raw.manifest

    def writable(self) -> bool:
        return True

    def write(self, data: ReadableBuffer) -> int:
        """Writes a bytes-like object; returns its length. ``InvalidArgument`` (a ``ValueError``) once closed."""
        n = self._raw.write(data)
        self._written += n
        return n

    def tell(self) -> int:
        """Bytes written so far."""
        self._checkClosed()
        return self._written

    def close(self) -> None:
        """Commits what was written as the new version (once; a second call does nothing)."""
        if self.closed:
            return
        try:
            self._raw.close()
        finally:
            super().close()

    def abort(self) -> None:
        """Ends the writer without committing anything; the previous version stays current."""
        try:
            self._raw.abort()
        finally:
            super().close()

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if exc_type is None:
            self.close()
        elif not self.closed:
            self.abort()

    def __del__(self) -> None:
        # Unlike a file, an unclosed writer commits nothing: the native writer, dropped, ends its put uncommitted.
        pass


class AsyncBlobReader(_OnCursor):
    """The asyncio form of ``BlobReader`` (``await Store.open_reader_async``): ``await read(n)``, ``seek``, ``tell``,
    ``async with``, ``async for`` (pieces as they are read)."""

    def __init__(self, cursor: ReadCursor) -> None:
        self._cursor = cursor
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def _check(self) -> None:
        if self._closed:
            raise ValueError("I/O operation on closed reader")

    async def read(self, size: Optional[int] = -1) -> bytes:
        """Reads up to ``size`` bytes (all that is left by default); ``b""`` at the end."""
        self._check()
        return await self._cursor.read_async(size)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._check()
        return self._cursor.seek(offset, whence)

    def tell(self) -> int:
        self._check()
        return self._cursor.tell()

    async def close(self) -> None:
        self._closed = True

    async def __aenter__(self) -> AsyncBlobReader:
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()

    def __aiter__(self) -> AsyncBlobReader:
        return self

    async def __anext__(self) -> bytes:
        piece = await self.read(1 << 20)
        if not piece:
            raise StopAsyncIteration
        return piece
