"""saltblob: one key-value API for values of any size, embedded (RocksDB) or on ScyllaDB / Apache Cassandra.

The Rust store, from Python::

    import saltblob

    with saltblob.open("rocksdb:///var/lib/saltblob") as store:
        store.put("videos/cat.mp4", open("cat.mp4", "rb"))     # streamed in bounded memory
        data = store.get("videos/cat.mp4").bytes()
        head = store.get_range("videos/cat.mp4", 0, 1024)       # fetches only the chunks it needs

Every I/O call has an ``_async`` twin for asyncio (``await store.put_async(...)``); both release the GIL while
the store works. Errors are ``saltblob.SaltblobError`` and its subclasses (``saltblob.exceptions``), which are also
the standard library's where one fits (``NotFound`` a ``FileNotFoundError``, ``Unavailable`` an ``OSError``).
A ``Store`` pickles as its URL and options. ``saltblob.fsspec`` is the ``saltblob://`` filesystem of fsspec
(pandas, pyarrow, dask); ``saltblob.compat.SaltedBlobStore`` is a drop-in for the salting article's Python class.

``from saltblob import *`` does not bring ``open`` (it would hide the built-in): call ``saltblob.open``.
"""

from __future__ import annotations

import atexit as _atexit

from . import exceptions
from ._io import AsyncBlobReader, BlobReader, BlobWriter
from ._saltblob import (
    AsyncBlobWriter,
    ByteStream,
    Description,
    GetResult,
    ListEntry,
    ListIterator,
    ListPage,
    Manifest,
    ReadCursor,
    Store,
    __version__,
    customer_key_id,
    escape_key,
    open,
    open_async,
    redact_url,
    unescape_key,
)
from ._types import FsckReport, GcReport, PutOptions, StoreOptions
from ._saltblob import _at_exit
from .exceptions import (
    AlreadyExists,
    ChecksumMismatch,
    Corrupt,
    InvalidArgument,
    KeyUnavailable,
    NotFound,
    PreconditionFailed,
    RangeNotSatisfiable,
    SaltblobError,
    TimedOut,
    Unavailable,
)

# Before the interpreter finalizes, saltblob's I/O threads stop entering Python (see runtime.rs, `with_gil`).
_atexit.register(_at_exit)

__all__ = [
    "AlreadyExists",
    "AsyncBlobReader",
    "AsyncBlobWriter",
    "BlobReader",
    "BlobWriter",
    "ByteStream",
    "ChecksumMismatch",
    "Corrupt",
    "Description",
    "FsckReport",
    "GcReport",
    "GetResult",
    "InvalidArgument",
    "KeyUnavailable",
    "ListEntry",
    "ListIterator",
    "ListPage",
    "Manifest",
    "NotFound",
    "PreconditionFailed",
    "PutOptions",
    "RangeNotSatisfiable",
    "ReadCursor",
    "SaltblobError",
    "Store",
    "StoreOptions",
    "TimedOut",
    "Unavailable",
    "__version__",
    "customer_key_id",
    "escape_key",
    "exceptions",
    "open_async",
    "redact_url",
    "unescape_key",
]
