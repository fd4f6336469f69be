"""fsspec's own abstract test suite (``fsspec.tests.abstract``: copy, get, put, open, pipe) on the ``saltblob://``
filesystem, on a RocksDB store and on the Cassandra node (``TEST_CQL``).

What does not apply to a flat key store, and so is not run:

- Empty directories: a directory is inferred from the keys under it (``a/b`` is one while a key starts with
  ``a/b/``), so ``mkdir`` makes nothing and ``supports_empty_directories`` is False. The suite then puts a
  ``dummy`` file in each target directory itself; every case of it runs.
- ``fsspec.tests.abstract.mv``: its two tests call ``fsspec.filesystem("file")`` (the local file system) on a
  temporary directory, whatever filesystem the suite is for; they test nothing of ours (``mv`` is tested in
  test_fsspec.py).
"""

from __future__ import annotations

import uuid
from typing import Iterator

import pytest
from fsspec.tests.abstract import (
    AbstractCopyTests,
    AbstractFixtures,
    AbstractGetTests,
    AbstractOpenTests,
    AbstractPipeTests,
    AbstractPutTests,
)

from conftest import CQL, OPTIONS, _cql_url
from saltblob.fsspec import SaltblobFileSystem

import saltblob


@pytest.fixture(scope="module", params=["rocksdb", "cql"])
def module_store(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A store for the whole module, of each kind (its URL; the filesystem opens it): every test works under a
    prefix of its own."""
    if request.param == "cql":
        if not CQL:
            pytest.skip("TEST_CQL is not set (HOST:PORT of a Cassandra or ScyllaDB node)")
        url = _cql_url("f")
        try:
            yield url
        finally:
            SaltblobFileSystem.clear_instance_cache()
            saltblob._saltblob._drop_cql_keyspace(url)
        return
    yield f"rocksdb://{tmp_path_factory.mktemp('fsspec')}/db"
    SaltblobFileSystem.clear_instance_cache()


class SaltblobFixtures(AbstractFixtures):  # type: ignore[misc]
    @pytest.fixture
    def fs(self, module_store: str) -> SaltblobFileSystem:
        return SaltblobFileSystem(store=module_store, **OPTIONS)

    @pytest.fixture
    def fs_path(self) -> str:
        return f"abstract-{uuid.uuid4().hex[:12]}"

    @pytest.fixture
    def supports_empty_directories(self) -> bool:
        return False


class TestSaltblobCopy(AbstractCopyTests, SaltblobFixtures):  # type: ignore[misc]
    pass


class TestSaltblobGet(AbstractGetTests, SaltblobFixtures):  # type: ignore[misc]
    pass


class TestSaltblobPut(AbstractPutTests, SaltblobFixtures):  # type: ignore[misc]
    pass


class TestSaltblobOpen(AbstractOpenTests, SaltblobFixtures):  # type: ignore[misc]
    pass


class TestSaltblobPipe(AbstractPipeTests, SaltblobFixtures):  # type: ignore[misc]
    pass
