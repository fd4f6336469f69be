"""Exceptions: saltblob's errors as the classes of ``saltblob.exceptions`` with the Rust messages, and bad input
refused as TypeError/ValueError subclasses naming the argument before any I/O."""

from __future__ import annotations

import pytest

import saltblob

# A CQL URL where nothing listens: opening it would fail with Unavailable after a connection attempt, so an error
# raised for an argument shows that the argument was checked before any I/O.
NOWHERE = "cql://127.0.0.1:1/nothing_here"


def test_hierarchy() -> None:
    assert issubclass(saltblob.NotFound, KeyError) and issubclass(saltblob.NotFound, saltblob.SaltblobError)
    assert issubclass(saltblob.InvalidArgument, ValueError)
    assert issubclass(saltblob.ChecksumMismatch, saltblob.Corrupt)
    assert issubclass(saltblob.AlreadyExists, saltblob.PreconditionFailed)
    assert issubclass(saltblob.RangeNotSatisfiable, saltblob.InvalidArgument)
    assert saltblob.Unavailable("x").retryable is False


def test_not_found_message_is_rusts(store: saltblob.Store, ns: str) -> None:
    with pytest.raises(KeyError) as e:
        store.get(ns + "missing")
    assert type(e.value) is saltblob.NotFound
    assert str(e.value) == f'not found: no blob with key "{ns}missing"'


def test_range_not_satisfiable(store: saltblob.Store, ns: str) -> None:
    store.put(ns + "r", b"0123456789")
    assert store.get_range(ns + "r", 2, 5) == b"234"
    assert store.get_range(ns + "r", 2, length=3) == b"234"
    assert store.get_range(ns + "r", 7) == b"789"
    with pytest.raises(saltblob.RangeNotSatisfiable):
        store.get_range(ns + "r", 20, 30)
    with pytest.raises(saltblob.InvalidArgument, match="suffix"):
        store.get_range(ns + "r", 1, suffix=2)


def test_unreachable_backend_is_unavailable() -> None:
    with pytest.raises(saltblob.Unavailable) as e:
        saltblob.open(NOWHERE + "?connect_timeout=1s")
    assert "127.0.0.1:1" in str(e.value)
    # A connection refused may pass: the Rust error says retryable, and so does the exception.
    assert e.value.retryable is True


@pytest.mark.parametrize(
    ("url", "options", "exc", "names"),
    [
        (42, {}, TypeError, "url must be"),
        ("foo://x", {}, saltblob.InvalidArgument, "invalid store URL"),
        ("rocksdb://", {}, saltblob.InvalidArgument, "rocksdb"),
        (NOWHERE, {"grace": "soon"}, TypeError, "grace must be"),
        (NOWHERE, {"grace": -1}, saltblob.InvalidArgument, "invalid grace"),
        (NOWHERE, {"inflight_bytes": "lots"}, saltblob.InvalidArgument, "invalid inflight_bytes"),
        (NOWHERE, {"codec": "gzip"}, saltblob.InvalidArgument, "invalid codec"),
        (NOWHERE + "?idle_value_buffers=some", {}, saltblob.InvalidArgument, "idle_value_buffers"),
        (NOWHERE, {"colour": "blue"}, TypeError, "unexpected keyword argument 'colour'"),
        (NOWHERE + "?sync=maybe", {}, saltblob.InvalidArgument, "sync"),
    ],
)
def test_bad_open_arguments_before_io(url: object, options: dict, exc: type, names: str) -> None:
    with pytest.raises(exc, match=names):
        saltblob.open(url, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call", "exc", "names"),
    [
        (lambda s: s.put(1, b"x"), TypeError, "key must be bytes or str, not int"),
        (lambda s: s.put("", b"x"), saltblob.InvalidArgument, "key"),
        (lambda s: s.put("k" * 2000, b"x"), saltblob.InvalidArgument, "key"),
        (lambda s: s.put("k", "text"), TypeError, "data must be bytes-like, not str"),
        (lambda s: s.put("k", 5), TypeError, "data must be"),
        (lambda s: s.put("k", b"x", chunk_size=-1), saltblob.InvalidArgument, "invalid chunk_size"),
        (lambda s: s.put("k", b"x", chunk_size=True), TypeError, "chunk_size must be"),
        (lambda s: s.put("k", b"x", metadata={"a": 1}), TypeError, "metadata"),
        (lambda s: s.put("k", b"x", if_version="nope"), saltblob.InvalidArgument, "invalid if_version"),
        (lambda s: s.put("k", b"x", if_absent=True, if_version="01a20fd657a0294f0cbc2bc814cff814"),
         saltblob.InvalidArgument, "if_absent/if_version"),
        (lambda s: s.put("k", b"x", priority="urgent!"), saltblob.InvalidArgument, "priority"),
        (lambda s: s.put("k", b"x", colour=1), TypeError, "unexpected keyword argument 'colour'"),
        (lambda s: s.put("k", ["x"]), TypeError, "the iterator gave str"),
        (lambda s: s.put("k", [1]), TypeError, "each piece"),
        (lambda s: s.get(None), TypeError, "key must be"),
        (lambda s: s.get_range("k", -1), OverflowError, "negative"),
        (lambda s: s.gc(grace="x"), TypeError, "grace must be"),
        (lambda s: s.list(3), TypeError, "prefix must be"),
        (lambda s: s.open_writer("k", codec=3), TypeError, "codec must be"),
    ],
)
def test_bad_call_arguments_name_the_argument(store: saltblob.Store, call, exc: type, names: str) -> None:
    with pytest.raises(exc, match=names):
        call(store)
    with pytest.raises(saltblob.NotFound):
        store.head("k")


def test_wrong_types_are_type_errors_and_bad_values_value_errors(store: saltblob.Store) -> None:
    with pytest.raises(TypeError):
        store.put(b"k", object())
    with pytest.raises(ValueError):
        store.put(b"k", b"x", codec="gzip")
