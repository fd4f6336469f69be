"""Encryption at rest from Python: a store URL naming a keyring seals what it puts (``encryption_key=``), the
manifest says under which key, sealed values read back whole and by range, and a store without the key raises
``KeyUnavailable`` naming it. The keyring file is written here from its specification in docs/format.md
("Keyring file, format 1"), so this also checks that the Rust reader follows the documented format."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

import saltblob


def _crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as the keyring's trailer uses."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def write_keyring(path: Path, keys: list[tuple[str, int]]) -> None:
    """A keyring of format 1 holding active keys (name, version) of random bytes, mode 0600."""
    body = b"SBKR" + bytes([1, 0, 0, 0]) + struct.pack("<I", len(keys))
    for name, version in keys:
        encoded = name.encode()
        body += bytes([len(encoded)]) + encoded + struct.pack("<IQ", version, 1) + bytes([1]) + os.urandom(32)
    body += struct.pack("<I", _crc32c(body))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(body)


def test_the_crc_is_crc32c() -> None:
    # The check value of CRC-32C.
    assert _crc32c(b"123456789") == 0xE3069283


def test_sealed_values_read_back_and_name_their_key(tmp_path: Path) -> None:
    ring = tmp_path / "keys.ring"
    write_keyring(ring, [("tenant", 1), ("other", 1)])
    base = f"rocksdb://{tmp_path}/db"
    keyed = f"{base}?encryption=local&keyring={ring}&encryption_key=tenant"
    values = {"inline": os.urandom(100), "chunked": os.urandom(50_000), "salted": os.urandom(300_000)}
    with saltblob.open(keyed, fanout_threshold="64KiB") as store:
        for key, value in values.items():
            manifest = store.put(key, value)
            assert manifest.encryption_key == "tenant version 1"
            assert manifest.encryption_provider == "local"
            assert store.head(key).encryption_key == "tenant version 1"
            assert store.get(key).bytes() == value
            assert store.get_range(key, 10, 90) == value[10:90]
        other = store.put("by-other", b"x" * 5000, encryption_key="other")
        assert other.encryption_key == "other version 1"
        with pytest.raises(saltblob.KeyUnavailable, match="no-such"):
            store.put("nope", b"y", encryption_key="no-such")
        with pytest.raises(saltblob.NotFound):
            store.head("nope")
        with pytest.raises(TypeError, match="encryption_key"):
            store.put("bad", b"z", encryption_key=7)

    with saltblob.open(base) as plain:
        with pytest.raises(saltblob.KeyUnavailable, match='tenant') as raised:
            plain.get("chunked").bytes()
        assert isinstance(raised.value, saltblob.Unavailable)
        assert not raised.value.retryable
        assert plain.head("chunked").encryption_key == "tenant version 1"
