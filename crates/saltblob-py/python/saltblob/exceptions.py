"""The exceptions of saltblob: one base class, ``SaltblobError``, and a class per kind of failure.

Messages are the Rust library's. Every exception has ``retryable``: whether the same call may succeed later.

- ``NotFound`` (also a ``FileNotFoundError``, with ``errno.ENOENT``, and a ``KeyError``): the key holds no blob.
- ``PreconditionFailed``: a conditional put or delete found another version; ``AlreadyExists`` (``if_absent``,
  also a ``FileExistsError``).
- ``Corrupt``: stored data is damaged (a manifest or chunk that does not decode, a missing chunk, a digest
  mismatch); ``ChecksumMismatch`` for a chunk that fails its CRC32C.
- ``InvalidArgument`` (also a ``ValueError``): a bad key, URL, option or size, found before any I/O;
  ``RangeNotSatisfiable`` for a range outside the blob.
- ``Unavailable`` (also an ``OSError``): the backend failed (unreachable nodes, overload) or a read raced a
  reclaim; ``retryable`` tells whether to try again; ``TimedOut`` (also a ``TimeoutError``) when the backend did
  not answer in time; ``KeyUnavailable`` when the key a sealed blob needs is unknown, retired, disabled or not
  configured (the message names it).

A wrong type of argument is a ``TypeError`` naming the argument.
"""

from __future__ import annotations

import errno


class SaltblobError(Exception):
    """Base class of every saltblob error."""

    retryable: bool = False
    """Whether the same call may succeed if tried again."""

    def __str__(self) -> str:
        # One line, the Rust message (KeyError would show its repr instead).
        return str(self.args[0]) if self.args else ""


class NotFound(SaltblobError, KeyError, FileNotFoundError):
    """The key holds no blob. Code written for files (``except FileNotFoundError``, ``errno.ENOENT``) and for
    mappings (``except KeyError``) both catch it."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.errno = errno.ENOENT


class PreconditionFailed(SaltblobError):
    """A conditional put or delete found another version than it expected (or a reader's key was overwritten)."""


class AlreadyExists(PreconditionFailed, FileExistsError):
    """A put with ``if_absent=True`` found a blob."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.errno = errno.EEXIST


class Corrupt(SaltblobError):
    """Stored data is damaged: it does not decode, a chunk is missing, or the digest does not match."""


class ChecksumMismatch(Corrupt):
    """A stored chunk failed its CRC32C check."""


class InvalidArgument(SaltblobError, ValueError):
    """A key, URL, option or value is wrong; nothing was done."""


class RangeNotSatisfiable(InvalidArgument):
    """A byte range does not lie within the blob."""


class Unavailable(SaltblobError, OSError):
    """The backend failed, or a read raced a reclaim; ``retryable`` says whether to try again."""


class TimedOut(Unavailable, TimeoutError):
    """The backend did not answer in time (a client or server timeout); ``retryable`` says whether to try again
    (a conditional write that timed out is not: its outcome is unknown, read the key to find out)."""


class KeyUnavailable(Unavailable):
    """The key-encryption key a sealed blob needs cannot be used (unknown, retired, disabled, not configured)."""


__all__ = [
    "AlreadyExists",
    "ChecksumMismatch",
    "Corrupt",
    "InvalidArgument",
    "KeyUnavailable",
    "NotFound",
    "PreconditionFailed",
    "RangeNotSatisfiable",
    "SaltblobError",
    "TimedOut",
    "Unavailable",
]
