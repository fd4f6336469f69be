"""The AWS SDK for Java v2 (tests/s3/java: SdkClient.java run with Java's source launcher on the jars that
scripts/s3-clients.sh fetched from Maven Central) against the server. Over plain HTTP the SDK signs every
PutObject and UploadPart body in aws-chunked form, each chunk with its own signature, which boto3 and awscli never
send: `STREAMING-AWS4-HMAC-SHA256-PAYLOAD` without a checksum, `STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER` with
its default CRC32 trailer. The test checks every byte read back (the SDK validating response checksums), the
listing, and, from the server's access log, that each upload did come in signed chunks: its `payload` and its
`chunk_signatures` (one per 128 KiB chunk, plus the final chunk)."""

import hashlib
import os
import re
import subprocess
from pathlib import Path

import pytest
from s3util import MIB, file_sha256, multipart_etag, write_pattern_file

KIB = 1024
SDK_CHUNK = 128 * KIB  # the SDK's aws-chunked chunk size
JAVA_TIMEOUT_S = 300

SINGLES = {"empty.bin": 0, "small.bin": 1000, "three-chunks.bin": 2 * SDK_CHUNK + 5, "two-m.bin": 2 * MIB + 1}
PARTS = [5 * MIB, 5 * MIB, 700 * KIB]
PAYLOAD = {
    "signed": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
    "trailer": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
}


def signed_chunks(size):
    """The signed chunks the SDK sends for a body of SIZE bytes: one per 128 KiB started, and the final one."""
    return -(-size // SDK_CHUNK) + 1


def access_lines(log_path):
    """{request_id: access log line} of the server's log."""
    lines = {}
    for line in Path(log_path).read_text(errors="replace").splitlines():
        if "saltblob_server::access" in line and (m := re.search(r"request_id=(\w+)", line)):
            lines[m.group(1)] = line
    return lines


def field(line, name):
    m = re.search(rf'\b{name}=("[^"]*"|\S+)', line)
    assert m, f"no {name} in {line}"
    return m.group(1).strip('"')


@pytest.fixture(scope="module")
def java():
    java_bin, lib = os.environ.get("S3_JAVA"), os.environ.get("S3_JAVA_LIB")
    if not java_bin or not lib or not list(Path(lib).glob("s3-*.jar")):
        pytest.fail("S3_JAVA and S3_JAVA_LIB (the SDK's jars) are not set: run the tests with scripts/s3-clients.sh")
    return java_bin, lib


def test_java_sdk_signed_chunked_uploads_round_trip(java, server, s3, bucket, tmp_path):
    java_bin, lib = java
    inp, out = tmp_path / "in", tmp_path / "out"
    (inp / "single").mkdir(parents=True)
    (inp / "parts").mkdir()
    want = {}
    for index, (name, size) in enumerate(SINGLES.items()):
        want[name] = write_pattern_file(inp / "single" / name, size, seed=700 + index)
    part_md5s = []
    whole = hashlib.sha256()
    for index, size in enumerate(PARTS):
        path = inp / "parts" / f"{index:02}"
        write_pattern_file(path, size, seed=800 + index)
        data = path.read_bytes()
        part_md5s.append(hashlib.md5(data).digest())
        whole.update(data)

    source = Path(__file__).parent / "java" / "SdkClient.java"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")} | {
        "SALTBLOB_TEST_ACCESS_KEY": server.access_key,
        "SALTBLOB_TEST_SECRET_KEY": server.secret_key,
        "AWS_CONFIG_FILE": os.devnull,
        "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
    }
    done = subprocess.run(
        [java_bin, "-cp", f"{lib}/*", str(source), server.endpoint, bucket, str(inp), str(out)],
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=JAVA_TIMEOUT_S,
    )
    assert done.returncode == 0, f"SdkClient exited with {done.returncode}:\n{done.stderr[-4000:]}"
    rows = [line.split("\t") for line in done.stdout.splitlines()]

    # Every object, read back through the SDK (which validates the checksums the server returns), is identical.
    for mode in PAYLOAD:
        for name, sha in want.items():
            assert file_sha256(out / mode / name) == sha, f"{mode}/{name}"
        assert file_sha256(out / mode / "multipart") == whole.hexdigest(), f"{mode}/multipart"

    # The listing, two keys a page, and the prefixes.
    listed = {r[1]: int(r[2]) for r in rows if r[0] == "Object"}
    sizes = {**SINGLES, "multipart": sum(PARTS)}
    assert listed == {f"{mode}/{name}": size for mode in PAYLOAD for name, size in sizes.items()}
    assert sorted(r[1] for r in rows if r[0] == "Prefix") == ["signed/", "trailer/"]
    etags = {r[1]: r[2] for r in rows if r[0] == "CompleteMultipartUpload"}
    assert etags == {f"{mode}/multipart": multipart_etag(part_md5s) for mode in PAYLOAD}

    # Each upload came in signed aws-chunked form, every chunk's signature counted as checked by the server.
    log = access_lines(server.log_path)
    uploads = [r for r in rows if r[0] in ("PutObject", "UploadPart")]
    assert len(uploads) == 2 * (len(SINGLES) + len(PARTS))
    for row in uploads:
        key, request_id = row[1], row[-1]
        mode = key.split("/")[0]
        line = log.get(request_id)
        assert line, f"no access log line for {row}"
        size = SINGLES[key.split("/")[1]] if row[0] == "PutObject" else PARTS[int(row[2]) - 1]
        assert field(line, "status") == "200", line
        assert field(line, "payload") == PAYLOAD[mode], line
        assert int(field(line, "chunk_signatures")) == signed_chunks(size), line
