"""Fixtures of the saltblob package's tests: stores on a temporary RocksDB directory and, when ``TEST_CQL`` names
a Cassandra/ScyllaDB node (``HOST:PORT``, as for the Rust suite), in a fresh keyspace of that node, dropped at the
end. Run by scripts/python-tests.sh."""

from __future__ import annotations

import os
import time
import uuid
from typing import Iterator

import pytest
from hypothesis import settings

import saltblob

# No example database in the working directory: every run draws afresh (failures print their example).
settings.register_profile("saltblob", database=None, print_blob=True)
settings.load_profile("saltblob")

CQL = os.environ.get("TEST_CQL")

# Store options of the tests' stores: blobs over 64 KiB are salted, so that a few hundred KiB exercise every layout.
OPTIONS = {"fanout_threshold": "64KiB"}


def _cql_url(tag: str) -> str:
    # Keyspace names: letters, digits and underscores, at most 48 characters; unique per run and fixture.
    return f"cql://{CQL}/pytest_{tag}_{int(time.time())}_{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def cql_store() -> Iterator[saltblob.Store]:
    """One store on ``TEST_CQL`` for the whole session (a keyspace costs seconds to create): a new keyspace,
    dropped at the end. Tests keep apart by their keys (``ns``)."""
    if not CQL:
        pytest.skip("TEST_CQL is not set (HOST:PORT of a Cassandra or ScyllaDB node)")
    url = _cql_url("s")
    try:
        with saltblob.open(url, **OPTIONS) as s:
            yield s
    finally:
        saltblob._saltblob._drop_cql_keyspace(url)


@pytest.fixture(params=["rocksdb", "cql"])
def store(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[saltblob.Store]:
    """An open store of each kind: an empty RocksDB store in the test's directory (closed after the test), or the
    session's store on ``TEST_CQL`` (skipped without it)."""
    if request.param == "cql":
        yield request.getfixturevalue("cql_store")
        return
    with saltblob.open(f"rocksdb://{tmp_path}/db", **OPTIONS) as s:
        yield s


@pytest.fixture
def ns() -> str:
    """A key prefix of the test's own (the Cassandra store is shared by the session)."""
    return f"t{uuid.uuid4().hex[:12]}/"


@pytest.fixture
def rocksdb_url(tmp_path: os.PathLike[str]) -> str:
    """The URL of an empty embedded store in the test's temporary directory."""
    return f"rocksdb://{tmp_path}/db"


@pytest.fixture
def cql_url() -> Iterator[str]:
    """A new keyspace on ``TEST_CQL`` (skipped without it), dropped after the test."""
    if not CQL:
        pytest.skip("TEST_CQL is not set (HOST:PORT of a Cassandra or ScyllaDB node)")
    url = _cql_url("c")
    yield url
    saltblob._saltblob._drop_cql_keyspace(url)
