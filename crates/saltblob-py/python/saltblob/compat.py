"""``SaltedBlobStore``: the Python class of the salting article ("Storing large blobs in ScyllaDB", the ScyllaDB
code samples' ``chunking-large-cells/python/salted_blob_store.py``) with its constructor, methods, constants,
dataclasses and exceptions, backed by saltblob on a CQL store. A program written for it changes one import::

    from saltblob.compat import DEFAULT_MAX_CONCURRENCY, SaltedBlobStore

and keeps its ``cassandra-driver`` session: the store reads the contact points, port and credentials from it
(or takes a ``cql://`` URL instead of a session, and needs no driver at all).

What is the same: ``write(key, blob, max_salt, chunk_size, ...)`` spreads ``min(chunks, max_salt)`` salts with
chunk ``i`` in salt ``i % salts``; ``read`` returns the chunks in order (``[]`` for an empty blob, ``None`` for a
missing key); ``delete`` of a missing key does nothing; ``describe`` returns ``BlobLayout`` with one
``PartitionInfo`` per salt; bad tuning values raise ``ValueError`` before any I/O, failures ``RuntimeError``.

What differs:

- The table layout is saltblob's (docs/format.md): the keyspace holds saltblob's own tables (manifests, chunks
  of versioned blobs, intents), not one table ``((key, salt), chunk_id)``. ``table`` is kept as an attribute but
  names no table: every ``SaltedBlobStore`` on a keyspace shares its keys. Tables written by the article's class
  are copied into a saltblob store with ``saltblob --store cql://HOST:9042/KEYSPACE import-salted KS.TABLE``.
- A write commits atomically: a reader sees the previous blob or the new one, never a mix, and a failed write
  leaves the previous blob whole (the article's class can leave a blob half overwritten).
- ``chunk_size`` must be at least 4096 bytes (saltblob's smallest chunk; ``InvalidArgument``, a ``ValueError``)
  and ``max_salt`` at most saltblob's limit. ``max_batch_bytes`` and ``max_concurrency`` are checked as the
  article's class does but not used: batches follow the store's ``batch_bytes`` and every call keeps saltblob's
  in-flight window (16 MiB) busy.
- ``create_schema(replication)`` takes the ``replication_factor`` of ``replication`` (saltblob picks the
  strategy); ``drop_schema`` drops the keyspace, as the article's class does.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from . import _saltblob
from ._types import StoreOptions
from .exceptions import InvalidArgument, NotFound, SaltblobError

DEFAULT_CHUNK_SIZE = 4096
DEFAULT_MAX_SALT = 100
DEFAULT_MAX_BATCH_BYTES = 1 * 1024 * 1024
DEFAULT_MAX_CONCURRENCY = 0

# The article's policy, salts from the first chunk on, and no inline values: every non-empty blob is chunks spread
# over min(chunks, max_salt) partitions, as its class lays them out.
_STORE_OPTIONS: StoreOptions = {"fanout_threshold": 0, "inline_limit": 0}


@dataclass
class PartitionInfo:
    """One salted partition of a blob: its salt, how many chunks (rows) and bytes it holds."""

    salt: int
    rows: int
    bytes: int


@dataclass
class BlobLayout:
    """How a blob is spread: its chunk count, its salt count and each salt's partition."""

    total_chunks: int
    salt_cardinality: int
    partitions: List[PartitionInfo]

    @property
    def total_bytes(self) -> int:
        """Bytes of all the partitions."""
        return sum(p.bytes for p in self.partitions)


def _session_url(session: Any) -> str:
    """``cql://[user:password@]host:port,.../`` of a cassandra-driver ``Session`` (its cluster's contact points,
    port and plain-text credentials), or ``session`` itself when it is a ``cql://`` URL."""
    if isinstance(session, str):
        if not session.startswith("cql://") or "?" in session or session.rstrip("/").count("/") > 2:
            raise InvalidArgument(
                f"invalid session: {session!r}; give a cassandra-driver Session or a cql://[user:password@]HOST:PORT URL"
                " (no keyspace, no options)"
            )
        return session.rstrip("/")
    cluster = getattr(session, "cluster", None)
    points = getattr(cluster, "contact_points", None)
    if not points:
        raise TypeError(f"session must be a cassandra-driver Session or a cql:// URL, not {type(session).__name__}")
    port = getattr(cluster, "port", 9042)
    hosts = ",".join(f"{p}:{port}" if ":" not in str(p) else f"[{p}]:{port}" for p in points)
    auth = getattr(cluster, "auth_provider", None)
    user = getattr(auth, "username", None)
    if user:
        password = str(getattr(auth, "password", "") or "").replace("%", "%25")
        return f"cql://{user}:{password}@{hosts}"
    return f"cql://{hosts}"


class SaltedBlobStore:
    """The salting article's ``SaltedBlobStore`` on saltblob: ``session`` is a cassandra-driver ``Session`` (or a
    ``cql://host:port`` URL), ``keyspace`` the keyspace saltblob keeps its tables in, ``table`` kept for
    compatibility (see the module's notes)."""

    def __init__(self, session: Any, keyspace: str, table: str = "salted_blobs") -> None:
        self.session = session
        self.keyspace = keyspace
        self.table = table
        self._base = _session_url(session)
        self._rf: Optional[int] = None
        self._store: Optional[_saltblob.Store] = None
        self._lock = threading.Lock()

    def _url(self) -> str:
        rf = f"?rf={self._rf}" if self._rf is not None else ""
        return f"{self._base}/{self.keyspace}{rf}"

    def _open(self) -> _saltblob.Store:
        with self._lock:
            if self._store is None:
                try:
                    self._store = _saltblob.open(self._url(), **_STORE_OPTIONS)
                except InvalidArgument:
                    raise
                except SaltblobError as e:
                    raise RuntimeError(f"open {self.keyspace}: {e}") from e
            return self._store

    # ------------------------------------------------------------------ schema
    def create_schema(self, replication: Optional[Dict[str, Any]] = None) -> None:
        """Creates the keyspace and saltblob's tables in it (if missing), replicated ``replication_factor``
        times (default 1)."""
        rf = (replication or {}).get("replication_factor", 1)
        try:
            self._rf = int(rf)
        except (TypeError, ValueError):
            raise ValueError(f"replication_factor must be an int, not {rf!r}") from None
        self._open()

    def drop_schema(self) -> None:
        """Drops the keyspace and everything in it."""
        with self._lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()
        execute = getattr(self.session, "execute", None)
        if execute is not None:
            execute(f"DROP KEYSPACE IF EXISTS {self.keyspace}")
        else:
            _saltblob._drop_cql_keyspace(self._url())

    # ------------------------------------------------------------------- write
    def write(
        self,
        key: bytes,
        blob: bytes,
        max_salt: int = DEFAULT_MAX_SALT,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    ) -> None:
        """Stores ``blob`` under ``key`` in ``min(chunks, max_salt)`` salted partitions of ``chunk_size``-byte
        chunks, replacing the previous blob atomically.

        Raises:
            ValueError: a tuning value out of range (before any I/O).
            RuntimeError: the write failed (the previous blob, if any, is still whole).
        """
        for name, value, least in (("max_salt", max_salt, 1), ("chunk_size", chunk_size, 1),
                                   ("max_batch_bytes", max_batch_bytes, 1), ("max_concurrency", max_concurrency, 0)):
            if value < least:
                raise ValueError(f"invalid {name}: {value}; it must be at least {least}")
        if max_batch_bytes < chunk_size:
            raise ValueError(f"invalid max_batch_bytes: {max_batch_bytes}; a batch must hold a chunk of {chunk_size}")
        store = self._open()
        try:
            store.put(key, blob, chunk_size=chunk_size, max_salt=max_salt)
        except InvalidArgument:
            raise
        except SaltblobError as e:
            raise RuntimeError(f"write {key!r}: {e}") from e

    # -------------------------------------------------------------------- read
    def read(self, key: bytes, max_concurrency: int = DEFAULT_MAX_CONCURRENCY) -> Optional[List[bytes]]:
        """The chunks of the blob under ``key``, in order (``[]`` for an empty blob), or ``None`` if there is none;
        ``b"".join(...)`` or ``itertools.chain.from_iterable`` gives its bytes.

        Raises:
            RuntimeError: the read failed, or the stored blob is damaged (missing chunk, checksum, digest).
        """
        store = self._open()
        try:
            result = store.get(key)
            if result.manifest.size == 0:
                return []
            return result.chunks()
        except NotFound:
            return None
        except InvalidArgument:
            raise
        except SaltblobError as e:
            raise RuntimeError(f"read {key!r}: {e}") from e

    # ------------------------------------------------------------------ delete
    def delete(self, key: bytes, max_concurrency: int = DEFAULT_MAX_CONCURRENCY) -> None:
        """Deletes the blob under ``key``; nothing to do if there is none."""
        store = self._open()
        try:
            store.delete(key)
        except InvalidArgument:
            raise
        except SaltblobError as e:
            raise RuntimeError(f"delete {key!r}: {e}") from e

    # ----------------------------------------------------------------- inspect
    def describe(self, key: bytes, max_concurrency: int = DEFAULT_MAX_CONCURRENCY) -> Optional[BlobLayout]:
        """How the blob under ``key`` is spread over its salted partitions, or ``None`` if there is none."""
        store = self._open()
        try:
            d = store.describe(key)
        except NotFound:
            return None
        except InvalidArgument:
            raise
        except SaltblobError as e:
            raise RuntimeError(f"describe {key!r}: {e}") from e
        m = d.manifest
        chunks, salts = m.chunk_count, max(m.salt_count, 1)
        per_salt = d.bytes_per_salt or [m.size]
        return BlobLayout(
            total_chunks=chunks,
            salt_cardinality=salts,
            partitions=[
                PartitionInfo(salt=s, rows=chunks // salts + (1 if s < chunks % salts else 0), bytes=b)
                for s, b in enumerate(per_salt)
            ],
        )

    def close(self) -> None:
        """Releases the saltblob store (not part of the article's class; the store is also released when this
        object is collected)."""
        with self._lock:
            store, self._store = self._store, None
        if store is not None:
            store.close()


__all__ = [
    "BlobLayout",
    "PartitionInfo",
    "SaltedBlobStore",
    "DEFAULT_CHUNK_SIZE",
    "DEFAULT_MAX_SALT",
    "DEFAULT_MAX_BATCH_BYTES",
    "DEFAULT_MAX_CONCURRENCY",
]
