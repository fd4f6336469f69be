"""saltblob: one key-value API for values of any size, embedded (RocksDB) or on ScyllaDB / Apache Cassandra.

The Rust store, from Python::

    import saltblob

    with saltblob.open("rocksdb:///var/lib/saltblob") as store:
        store.put("videos/cat.mp4", open("cat.mp4", "rb"))     # streamed in bounded memory
        data = store.get("videos/cat.mp4").bytes()
        head = store.get_range("videos/cat.mp4", 0, 1024)       # fetches only the chunks it needs

Every I/O call has an ``_async`` twin for asyncio (``await store.put_async(...)``); both release the GIL while
the store works. Errors are ``saltblob.SaltblobError`` and its subclasses (``saltblob.exceptions``).
``saltblob.compat.SaltedBlobStore`` is a drop-in for the salting article's Python class.
"""

from __future__ import annotations

import atexit as _atexit

from . import exceptions
from ._io import AsyncBlobReader, BlobReader
from ._saltblob import (
    AsyncBlobWriter,
    BlobWriter,
    ByteStream,
    Description,
    GetResult,
    ListEntry,
    ListIterator,
    Manifest,
    ReadCursor,
    Store,
    __version__,
    customer_key_id,
    open,
    open_async,
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
    "Manifest",
    "NotFound",
    "PreconditionFailed",
    "PutOptions",
    "RangeNotSatisfiable",
    "ReadCursor",
    "SaltblobError",
    "Store",
    "StoreOptions",
    "Unavailable",
    "__version__",
    "customer_key_id",
    "exceptions",
    "open",
    "open_async",
]
