"""Types of the native module ``saltblob._saltblob`` (Rust, pyo3). Import its names from ``saltblob``."""

from __future__ import annotations

import builtins
import sys
from types import TracebackType
from typing import (
    IO,
    Any,
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Dict,
    Iterable,
    Iterator,
    List,
    Optional,
    Sequence,
    Tuple,
    Type,
    Union,
)

from typing_extensions import Unpack, final

from ._io import AsyncBlobReader, BlobReader, BlobWriter
from ._types import FsckReport, GcReport, PutOptions, Seconds, Size, StoreOptions

if sys.version_info >= (3, 12):
    from collections.abc import Buffer
else:
    from typing_extensions import Buffer

Key = Union[bytes, bytearray, str]
"""A key: bytes, or a str standing for its UTF-8 bytes (1 to 1024 bytes)."""

CustomerKey = Union[bytes, bytearray]
"""A customer key (S3's SSE-C): 32 bytes, e.g. ``os.urandom(32)``."""

Data = Union[Buffer, IO[bytes], Iterable[Buffer]]
"""What ``put`` stores: a bytes-like object, a binary file object or an iterator of bytes-like pieces."""

__all__ = [
    "open",
    "open_async",
    "customer_key_id",
    "escape_key",
    "unescape_key",
    "redact_url",
    "_drop_cql_keyspace",
    "_at_exit",
    "Canceller",
    "Completions",
    "Store",
    "Manifest",
    "Description",
    "ListEntry",
    "GetResult",
    "ByteStream",
    "ReadCursor",
    "RawBlobWriter",
    "AsyncBlobWriter",
    "ListIterator",
    "ListPage",
    "__version__",
]

__version__: str

def open(url: str, **options: Unpack[StoreOptions]) -> Store:
    """Opens the store at ``url`` (``rocksdb:///path``, ``cql://host:9042/keyspace``, ``memory://``, with the CLI's
    URL options). Raises ``TypeError``/``InvalidArgument`` for a bad URL or option before any I/O."""

def open_async(url: str, **options: Unpack[StoreOptions]) -> Awaitable[Store]:
    """``open()`` for asyncio."""

def customer_key_id(key: CustomerKey) -> str:
    """The fingerprint of a 32-byte customer key that is the same in every store: the ``Manifest.encryption_key``
    of versions sealed before fingerprints were per store (``Store.customer_key_id`` gives the one of new ones)."""

def escape_key(key: Key) -> str:
    """The key as the CLI shows and takes it: ``%``, white space, control characters and bytes that are not UTF-8
    as ``%XX``, every other character as itself. ``unescape_key`` reads it back."""

def unescape_key(text: str) -> bytes:
    """The key ``escape_key`` wrote as ``text``; ``InvalidArgument`` for a ``%`` without two hex digits."""

def redact_url(url: str) -> str:
    """The store URL with its password hidden, as ``Store.url`` shows it."""

def _drop_cql_keyspace(url: str) -> None: ...
def _at_exit() -> None: ...

@final
class Manifest:
    """One committed version of a blob (``put``, ``head``)."""

    version: str
    size: int
    created_micros: int
    expires_micros: Optional[int]
    digest: str
    layout: str
    chunk_size: int
    chunk_count: int
    salt_count: int
    codec: str
    stored_bytes: int
    content_type: Optional[str]
    metadata: Dict[str, str]
    encryption_key: Optional[str]
    """The key the version is sealed under (a customer key's fingerprint); ``None`` for plaintext."""
    encryption_provider: Optional[str]
    """``"local"``, ``"aws-kms"`` or ``"customer"`` (the reader gives the key); ``None`` for plaintext."""

@final
class Description:
    """How one key is laid out (``describe``)."""

    key: bytes
    manifest: Manifest
    layout: str
    bytes_per_salt: List[int]

@final
class ListEntry:
    """One blob of a listing; ``manifest`` is ``None`` and ``error`` a ``Corrupt`` when its manifest is damaged."""

    key: bytes
    manifest: Optional[Manifest]
    error: Optional[BaseException]

@final
class ByteStream(Iterator[bytes], AsyncIterator[bytes]):
    """The bytes of a read as they come (``GetResult.stream``)."""

    def __iter__(self) -> ByteStream: ...
    def __next__(self) -> bytes: ...
    def __aiter__(self) -> ByteStream: ...
    def __anext__(self) -> Awaitable[bytes]: ...

@final
class GetResult:
    """What ``get`` returns: the manifest, and the bytes, which can be taken once."""

    @property
    def manifest(self) -> Manifest: ...
    @property
    def range(self) -> Tuple[int, int]: ...
    def bytes(self) -> builtins.bytes: ...
    def bytes_async(self) -> Awaitable[builtins.bytes]: ...
    def chunks(self) -> List[builtins.bytes]: ...
    def chunks_async(self) -> Awaitable[List[builtins.bytes]]: ...
    def stream(self, chunk_size: Optional[Size] = None) -> ByteStream: ...

@final
class ReadCursor:
    """The position of a file-like reader (used by ``BlobReader`` and ``AsyncBlobReader``)."""

    @property
    def manifest(self) -> Manifest: ...
    @property
    def size(self) -> int: ...
    def read(self, size: Optional[int] = None) -> bytes: ...
    def read_async(self, size: Optional[int] = None) -> Awaitable[bytes]: ...
    def seek(self, offset: int, whence: int = 0) -> int: ...
    def tell(self) -> int: ...

@final
class RawBlobWriter:
    """The native writer under ``saltblob.BlobWriter`` (``Store.open_writer``): commits on ``close``; nothing on an
    exception."""

    @property
    def closed(self) -> bool: ...
    @property
    def manifest(self) -> Optional[Manifest]: ...
    def write(self, data: Buffer) -> int: ...
    def close(self) -> Manifest: ...
    def abort(self) -> None: ...
    def writable(self) -> bool: ...
    def flush(self) -> None: ...
    def __enter__(self) -> RawBlobWriter: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class AsyncBlobWriter:
    """The asyncio form of ``BlobWriter`` (``Store.open_writer_async``)."""

    @property
    def closed(self) -> bool: ...
    @property
    def manifest(self) -> Optional[Manifest]: ...
    def write(self, data: Buffer) -> Awaitable[int]: ...
    def close(self) -> Awaitable[Manifest]: ...
    def abort(self) -> Awaitable[None]: ...
    def __aenter__(self) -> Awaitable[AsyncBlobWriter]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

@final
class ListIterator(Iterator[ListEntry], AsyncIterator[ListEntry]):
    """The blobs under a prefix, in key order, read a page at a time."""

    def __iter__(self) -> ListIterator: ...
    def __next__(self) -> ListEntry: ...
    def __aiter__(self) -> ListIterator: ...
    def __anext__(self) -> Awaitable[ListEntry]: ...

@final
class ListPage:
    """One page of a listing (``Store.list_page``, ``Store.list_with_delimiter``)."""

    @property
    def entries(self) -> List[ListEntry]: ...
    @property
    def common_prefixes(self) -> List[bytes]:
        """With a delimiter: each key's part up to and including the delimiter after the prefix, once."""
    @property
    def next_token(self) -> Optional[str]:
        """The ``page_token`` of the next page; ``None`` on the last one."""

@final
class Canceller:
    def __call__(self, future: Any) -> None: ...

@final
class Completions:
    """An event loop's queue of ended ``_async`` calls (internal: ``saltblob._io._completions``)."""

    def __new__(cls, resolve: Any) -> Completions: ...
    def fileno(self) -> int: ...
    def drain(self) -> None: ...

@final
class Store:
    """A saltblob store (``saltblob.open``); a context manager (sync and async) that closes it."""

    @property
    def closed(self) -> bool: ...
    @property
    def url(self) -> str: ...
    def put(self, key: Key, data: Data, **options: Unpack[PutOptions]) -> Manifest: ...
    def put_async(
        self, key: Key, data: Union[Data, AsyncIterable[Buffer]], **options: Unpack[PutOptions]
    ) -> Awaitable[Manifest]: ...
    def get(
        self, key: Key, *, priority: Optional[str] = None, customer_key: Optional[CustomerKey] = None
    ) -> GetResult: ...
    def get_async(
        self, key: Key, *, priority: Optional[str] = None, customer_key: Optional[CustomerKey] = None
    ) -> Awaitable[GetResult]: ...
    def get_range(
        self,
        key: Key,
        start: Optional[int] = None,
        end: Optional[int] = None,
        *,
        length: Optional[int] = None,
        suffix: Optional[int] = None,
        priority: Optional[str] = None,
        customer_key: Optional[CustomerKey] = None,
    ) -> bytes: ...
    def get_range_async(
        self,
        key: Key,
        start: Optional[int] = None,
        end: Optional[int] = None,
        *,
        length: Optional[int] = None,
        suffix: Optional[int] = None,
        priority: Optional[str] = None,
        customer_key: Optional[CustomerKey] = None,
    ) -> Awaitable[bytes]: ...
    def head(self, key: Key) -> Manifest: ...
    def customer_key_id(self, key: CustomerKey) -> str: ...
    def head_async(self, key: Key) -> Awaitable[Manifest]: ...
    def delete(self, key: Key, *, if_version: Optional[str] = None) -> Optional[str]: ...
    def delete_async(self, key: Key, *, if_version: Optional[str] = None) -> Awaitable[Optional[str]]: ...
    def list(self, prefix: Optional[Key] = None) -> ListIterator: ...
    def list_async(self, prefix: Optional[Key] = None) -> ListIterator: ...
    def describe(self, key: Key) -> Description: ...
    def describe_async(self, key: Key) -> Awaitable[Description]: ...
    def gc(
        self, *, grace: Optional[Seconds] = None, dry_run: bool = False, prefix: Optional[Key] = None
    ) -> GcReport: ...
    def gc_async(
        self, *, grace: Optional[Seconds] = None, dry_run: bool = False, prefix: Optional[Key] = None
    ) -> Awaitable[GcReport]: ...
    def fsck(
        self, *, repair: bool = False, min_age: Optional[Seconds] = None, prefix: Optional[Key] = None
    ) -> FsckReport: ...
    def fsck_async(
        self, *, repair: bool = False, min_age: Optional[Seconds] = None, prefix: Optional[Key] = None
    ) -> Awaitable[FsckReport]: ...
    def open_reader(self, key: Key, *, customer_key: Optional[CustomerKey] = None) -> BlobReader: ...
    def open_reader_async(
        self, key: Key, *, customer_key: Optional[CustomerKey] = None
    ) -> Awaitable[AsyncBlobReader]: ...
    def open_writer(self, key: Key, **options: Unpack[PutOptions]) -> BlobWriter: ...
    def open_writer_async(self, key: Key, **options: Unpack[PutOptions]) -> AsyncBlobWriter: ...
    def exists(self, key: Key) -> bool: ...
    def exists_async(self, key: Key) -> Awaitable[bool]: ...
    def copy(
        self, src: Key, dst: Key, *, overwrite: bool = True, customer_key: Optional[CustomerKey] = None
    ) -> Manifest:
        """Copies ``src``'s current version to ``dst`` inside the store (``overwrite=False``: ``AlreadyExists``
        if ``dst`` holds a blob)."""
    def copy_async(
        self, src: Key, dst: Key, *, overwrite: bool = True, customer_key: Optional[CustomerKey] = None
    ) -> Awaitable[Manifest]: ...
    def rename(
        self, src: Key, dst: Key, *, overwrite: bool = True, customer_key: Optional[CustomerKey] = None
    ) -> Manifest:
        """``copy``, then a delete of the source version copied."""
    def rename_async(
        self, src: Key, dst: Key, *, overwrite: bool = True, customer_key: Optional[CustomerKey] = None
    ) -> Awaitable[Manifest]: ...
    def delete_many(self, keys: Iterable[Key]) -> List[Optional[str]]:
        """Deletes every key (several at once); the version each held, in order."""
    def delete_many_async(self, keys: Iterable[Key]) -> Awaitable[List[Optional[str]]]: ...
    def get_ranges(
        self,
        key: Key,
        starts: Sequence[int],
        ends: Optional[Sequence[int]] = None,
        *,
        lengths: Optional[Sequence[int]] = None,
        if_version: Optional[str] = None,
        priority: Optional[str] = None,
        customer_key: Optional[CustomerKey] = None,
    ) -> List[bytes]:
        """Several ranges of one version of ``key``, in order; nearby ones are read as one."""
    def get_ranges_async(
        self,
        key: Key,
        starts: Sequence[int],
        ends: Optional[Sequence[int]] = None,
        *,
        lengths: Optional[Sequence[int]] = None,
        if_version: Optional[str] = None,
        priority: Optional[str] = None,
        customer_key: Optional[CustomerKey] = None,
    ) -> Awaitable[List[bytes]]: ...
    def list_page(
        self,
        prefix: Optional[Key] = None,
        *,
        delimiter: Optional[Key] = None,
        page_token: Optional[str] = None,
        limit: int = 1000,
    ) -> ListPage:
        """One page of the listing of ``prefix``; with a delimiter, keys past it grouped as common prefixes."""
    def list_page_async(
        self,
        prefix: Optional[Key] = None,
        *,
        delimiter: Optional[Key] = None,
        page_token: Optional[str] = None,
        limit: int = 1000,
    ) -> Awaitable[ListPage]: ...
    def list_with_delimiter(self, prefix: Optional[Key] = None, delimiter: str = "/") -> ListPage:
        """Every page of ``list_page(prefix, delimiter=delimiter)`` in one."""
    def list_with_delimiter_async(
        self, prefix: Optional[Key] = None, delimiter: str = "/"
    ) -> Awaitable[ListPage]: ...
    def __reduce__(self) -> Tuple[Any, Tuple[str, Dict[str, Any]]]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Store: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...
    def __aenter__(self) -> Awaitable[Store]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Awaitable[bool]: ...
