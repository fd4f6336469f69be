"""The keyword options and reports of saltblob as TypedDicts, for type checkers and readers of the API."""

from __future__ import annotations

import datetime
from typing import Dict, List, Optional, TypedDict, Union

Size = Union[int, str]
"""A byte count: an int, or a string such as ``"64KiB"`` or ``"8MiB"``."""

Seconds = Union[int, float, datetime.timedelta]
"""A duration: seconds, or a ``datetime.timedelta``."""


class StoreOptions(TypedDict, total=False):
    """Keyword options of ``saltblob.open``: the store configuration beyond the URL (whose options, such as
    ``sync=``, ``rf=``, ``chunk_size=`` or ``classes=``, are the CLI's)."""

    grace: Seconds
    """How long replaced and deleted versions stay readable. Defaults to 300 seconds."""
    intent_lease: Seconds
    """How long a put's intent stays valid without renewal. Defaults to 60 seconds."""
    inflight_bytes: Size
    """Bytes of chunks one put or get keeps in flight. Defaults to 16 MiB."""
    batch_bytes: Size
    """Bytes of chunks sent to the backend in one call. Defaults to 1 MiB (capped by the backend)."""
    read_ahead_budget: Size
    """Bytes all reads of the store together fetch ahead. Defaults to 256 MiB."""
    max_blob_size: Size
    """Largest blob accepted. Defaults to no limit."""
    inline_limit: Size
    """Blobs up to this size are stored inside their manifest. Defaults to 16 KiB."""
    fanout_threshold: Size
    """Chunked blobs up to this size use one partition. Defaults to 8 MiB."""
    max_salt: int
    """Largest salt count of a salted blob. Defaults to 100."""
    codec: str
    """Compression tried on each chunk: ``"none"`` (default), ``"zstd"`` or ``"lz4"``."""


class PutOptions(TypedDict, total=False):
    """Keyword options of a put (``put``, ``put_async``, ``open_writer``, ``open_writer_async``)."""

    content_type: Optional[str]
    """MIME type stored in the manifest."""
    metadata: Optional[Dict[str, str]]
    """User metadata stored in the manifest (at most 8 KiB)."""
    if_absent: bool
    """Commit only if the key holds no blob (else ``AlreadyExists``)."""
    if_version: Optional[str]
    """Commit only if the key's current version is this one (else ``PreconditionFailed``)."""
    chunk_size: Optional[Size]
    """Chunk size of this blob. Defaults to the store's, by the blob's size."""
    max_salt: Optional[int]
    """Largest salt count of this blob. Defaults to the store's."""
    codec: Optional[str]
    """Compression of this blob's chunks: ``"none"``, ``"zstd"`` or ``"lz4"``."""
    priority: Optional[str]
    """The priority class the put runs in (``"interactive"``, ``"bulk"`` or a class of the URL's ``classes=``)."""
    size_hint: Optional[Size]
    """The length of a streamed value, when known: the layout is exact from the first byte."""
    ttl: Optional[Seconds]
    """Expire the blob this long after the put (seconds or a ``timedelta``): it then reads as ``NotFound`` and gc
    reclaims it; ``Manifest.expires_micros`` says when. Defaults to never."""
    encryption_key: Optional[str]
    """Seal the blob under this key of the store's key provider (the URL names it: ``encryption=local&keyring=FILE``
    with a keyring name, or ``encryption=aws-kms`` with a KMS key id, ARN or alias),
    over the URL's ``encryption_key=``; ``Manifest.encryption_key`` says which. Defaults to the store's key, if any."""
    customer_key: Optional[bytes]
    """Seal the blob under this key of the caller's, 32 bytes (S3's SSE-C): it is never stored, and every read must
    give it again (``get(..., customer_key=)``), else ``KeyUnavailable``. No key provider is needed.
    ``Manifest.encryption_key`` is then its fingerprint in the store (``Store.customer_key_id``) and
    ``Manifest.encryption_provider`` is ``"customer"``. Not with ``encryption_key``."""


class GcReport(TypedDict):
    """What ``Store.gc`` found and reclaimed."""

    dry_run: bool
    puts_in_flight: int
    stale_intents: int
    abandoned_puts: int
    abandoned_chunks: int
    expired: int
    reclaimed_versions: int
    reclaimed_chunks: int
    reclaimed_bytes: int
    awaiting_grace: bool
    space_bytes_before: Optional[int]
    space_bytes_after: Optional[int]


class Damage(TypedDict):
    """A damaged blob found by ``Store.fsck``."""

    key: bytes
    version: Optional[str]
    problem: str


class Orphan(TypedDict):
    """Chunks no blob refers to, found by ``Store.fsck``."""

    key: bytes
    version: str
    chunks: int
    reason: str
    removed: bool


class Unverified(TypedDict):
    """A sealed blob ``Store.fsck`` could not read: its key is unavailable (the store was opened without its key
    provider, or the provider refused)."""

    key: bytes
    version: str
    reason: str


class IndexCheck(TypedDict):
    """The backend's own index of the keys (the Cassandra/ScyllaDB listing index) compared with the manifests by
    ``Store.fsck``: keys it lacks (damage: listings miss them; ``repair=True`` writes them back) and stale entries
    (``repair=True`` removes them)."""

    name: str
    manifests: int
    entries: int
    missing: List[bytes]
    restored: int
    stale: int
    stale_removed: int


class FsckReport(TypedDict):
    """What ``Store.fsck`` checked and found. ``index`` is None on a backend whose manifests are their own index
    (RocksDB, memory)."""

    blobs: int
    bytes: int
    chunks: int
    damaged: List[Damage]
    orphans: List[Orphan]
    puts_in_flight: int
    awaiting_reclaim: int
    unverified: List[Unverified]
    index: Optional[IndexCheck]
