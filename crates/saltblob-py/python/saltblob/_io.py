"""File-like readers of one blob version: ``BlobReader`` (an ``io.RawIOBase``, so ``io.BufferedReader``,
``readline``, iteration and every consumer of binary files work with it) and ``AsyncBlobReader``. Both sit on a
``ReadCursor`` of the native module, which fetches the ranges asked for, reading further ahead while reads go on
sequentially, and raises ``PreconditionFailed`` if the key is overwritten meanwhile.
"""

from __future__ import annotations

import io
import weakref
from types import TracebackType
from typing import TYPE_CHECKING, Any, AsyncIterable, Awaitable, Optional, Type

if TYPE_CHECKING:
    import asyncio

    from _typeshed import WriteableBuffer

    from ._saltblob import AsyncBlobWriter, GetResult, Manifest, ReadCursor


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
        self._checkClosed()  # type: ignore[attr-defined]
        return self._cursor.read(size)

    def readall(self) -> bytes:
        return self.read(-1)

    def readinto(self, buffer: WriteableBuffer) -> int:
        self._checkClosed()  # type: ignore[attr-defined]
        view = memoryview(buffer).cast("B")
        data = self._cursor.read(len(view))
        view[: len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._checkClosed()  # type: ignore[attr-defined]
        return self._cursor.seek(offset, whence)

    def tell(self) -> int:
        self._checkClosed()  # type: ignore[attr-defined]
        return self._cursor.tell()


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
