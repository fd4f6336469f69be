"""The stores this process has open, by URL and options: a pickled ``Store`` unpickles as the store of its URL that
is open here already, else as one opened again (``reopen``); the fsspec filesystem shares stores the same way
(``shared``). An embedded store can be open once at a time, so opening it twice in one process would fail.

Every store ``saltblob.open`` and ``saltblob.open_async`` return is registered here (weakly: a store nobody holds
goes). After ``fork()``, the stores of the parent are not the child's: the child opens its own (a ``cql://`` store
works; an embedded one is refused with an error that says why).
"""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Dict, Tuple

from . import _saltblob
from .exceptions import InvalidArgument

_Key = Tuple[int, str, str]

_lock = threading.RLock()
_open: weakref.WeakValueDictionary[_Key, _saltblob.Store] = weakref.WeakValueDictionary()


def _key(pid: int, url: str, options: Dict[str, Any]) -> _Key:
    return (pid, url, repr(sorted(options.items())))


def register(store: _saltblob.Store) -> None:
    """Records ``store`` (just opened) as this process's store of its URL and options."""
    url, options = store.__reduce__()[1]
    with _lock:
        _open[_key(os.getpid(), url, options)] = store


def _forked_from(url: str, options: Dict[str, Any]) -> int | None:
    """The process this one was forked from when it had ``url`` open with ``options``."""
    with _lock:
        for (pid, u, o), store in list(_open.items()):
            if pid != os.getpid() and (u, o) == (url, repr(sorted(options.items()))) and store is not None:
                return pid
    return None


def shared(url: str, options: Dict[str, Any]) -> _saltblob.Store:
    """The open store of ``url`` and ``options`` in this process, else the store opened now (and registered)."""
    with _lock:
        store = _open.get(_key(os.getpid(), url, options))
        if store is not None and not store.closed:
            return store
        parent = _forked_from(url, options)
        if parent is not None and url.startswith("rocksdb:"):
            raise InvalidArgument(
                f"the embedded store {_saltblob.redact_url(url)} is open in process {parent}, from which this "
                "process was forked; an embedded store can be open in one process at a time (use a cql:// store "
                "to share one between processes, or close it in the parent before forking)"
            )
        return _saltblob.open(url, **options)


def reopen(url: str, options: Dict[str, Any]) -> _saltblob.Store:
    """What a pickled ``Store`` unpickles as: ``shared(url, options)``."""
    return shared(url, options)
